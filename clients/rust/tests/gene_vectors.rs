//! The genes of 10,000 bigint, text and uuid owners in clients/gene-vectors.json (written by
//! the extension, checked against it again by tests/cluster/test_routing.py): every client
//! compares its genes with the same file.

use id_gen_client::Key;

#[test]
fn the_genes_of_the_shared_vectors_equal_the_extensions() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../gene-vectors.json");
    let text = std::fs::read_to_string(path).expect("clients/gene-vectors.json");
    let vectors: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (kind, key_of) in [
        (
            "bigint",
            (|o: &str| Key::Owner(o.parse().expect("an int64"))) as fn(&str) -> Key,
        ),
        ("text", |o: &str| Key::OwnerText(o.to_owned())),
        ("uuid", |o: &str| {
            Key::OwnerUuid(id_gen_client::key::parse_uuid(o).expect("a uuid"))
        }),
    ] {
        let entries = vectors[kind].as_array().expect("a list per type");
        assert_eq!(entries.len(), 10_000, "{kind}");
        for entry in entries {
            let owner = entry[0].as_str().expect("the owner as text");
            let want = entry[1].as_u64().expect("its gene");
            checked += 1;
            if u64::from(key_of(owner).gene()) != want {
                wrong.push((kind, owner.to_owned(), want));
            }
        }
    }
    assert_eq!(checked, 30_000);
    assert!(
        wrong.is_empty(),
        "{} genes differ, the first: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(3)]
    );
}
