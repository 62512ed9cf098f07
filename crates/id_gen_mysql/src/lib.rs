//! `id_gen_mysql` — id_gen's shard genes, owner-affine ids and order numbers inside
//! MariaDB, as loadable functions (UDFs) in `libid_gen_mysql.so`.
//!
//! Every computation is `id_gen_core`'s, the same code the PostgreSQL extension runs: the
//! gene hash, the 64-bit and 16-byte id layouts and the order-number cipher have no second
//! implementation here. This crate only moves values between MariaDB's UDF protocol and the
//! core, and reads the order-number keys PostgreSQL exported (see [`keys`]).
//!
//! | SQL | returns |
//! |---|---|
//! | `id_gen_shard_gene(owner)` | INTEGER: gene 0..65535; an INTEGER owner hashes its 8 bytes little-endian, a string its bytes as given |
//! | `id_gen_shard_of(id)` | INTEGER: gene of a BIGINT id or of an 8-/16-byte binary id |
//! | `id_gen_seq_of(id)` | INTEGER: the sequence part |
//! | `id_gen_compose_id(gene, seq)` | INTEGER: `gene << 47 \| seq`, an error (22003) out of range |
//! | `id_gen_encode_order_no(order_id)` | STRING: the UUIDv8 order number as 36-character text |
//! | `id_gen_encode_order_no_bin(order_id)` | STRING: the same 16 bytes (for BINARY(16)) |
//! | `id_gen_decode_order_no(order_no)` | INTEGER: the order id; not an order number → NULL and a warning |
//!
//! Inside mysqld: no panic crosses the C boundary ([`report`]); nothing runs outside a call
//! (no threads, so `dlclose` is safe); the only shared state is the key cache behind a
//! mutex, and per-statement state lives in the `initid->ptr` box `udf` manages.

pub mod args;
pub mod keys;
pub mod report;

use args::{Arg, Param};
use id_gen_core::{gene, layout};
use keys::KeySet;
use report::{init_guard, process_guard, Errno, Fail};
use std::num::NonZeroU8;
use std::sync::Arc;
use udf::prelude::*;

/// What a function keeps from `init` to `process` besides its arguments, made at `init`.
pub trait State: Sized {
    fn new(cfg: &UdfCfg<Init>) -> Result<Self, String>;
}

/// The layout functions keep nothing.
impl State for () {
    fn new(_cfg: &UdfCfg<Init>) -> Result<Self, String> {
        Ok(())
    }
}

/// The keys a statement uses, read once at `init`. Without a way to report errors per row
/// (outside mariadbd) a key problem fails `init` instead; inside, it is raised with its full
/// text by the first row that needs a key (and a statement of NULLs needs none).
pub struct Keys(Result<Arc<KeySet>, String>);

impl State for Keys {
    fn new(_cfg: &UdfCfg<Init>) -> Result<Self, String> {
        match keys::current() {
            Ok(k) => Ok(Keys(Ok(k))),
            Err(e) if report::can_report() => Ok(Keys(Err(e))),
            Err(e) => Err(e),
        }
    }
}

impl Keys {
    fn get(&self) -> Result<&KeySet, Fail> {
        self.0
            .as_deref()
            .map_err(|e| Fail::Error(Errno::Config, e.clone()))
    }
}

/// The encoders' state: the keys, and one row's output of `N` bytes (returned by reference,
/// so nothing is allocated per row).
pub struct Encoder<const N: usize> {
    keys: Keys,
    out: [u8; N],
}

impl<const N: usize> State for Encoder<N> {
    fn new(cfg: &UdfCfg<Init>) -> Result<Self, String> {
        cfg.set_max_len(N as u64);
        Ok(Encoder {
            keys: Keys::new(cfg)?,
            out: [0; N],
        })
    }
}

/// Declares the UDFs. For each: the struct `$ty` holding its [`State`], registered as
/// `$name` (the C symbols `$name`, `$name_init`, `$name_deinit` MariaDB looks up), its
/// arguments checked at `init` against `$params`, and `$row(&mut state, args)` computing
/// one row. Both run inside the panic guards; every result may be NULL.
macro_rules! udfs {
    ($($(#[$doc:meta])* $ty:ident($name:tt, $sig:expr, $params:expr)
        -> [$($ret:tt)+] $state:ty = $row:expr;)*) => {$(
        $(#[$doc])*
        pub struct $ty($state);

        #[register(name = $name)]
        impl BasicUdf for $ty {
            type Returns<'a> = $($ret)+;

            fn init(cfg: &UdfCfg<Init>, args: &ArgList<Init>) -> Result<Self, String> {
                init_guard($sig, || {
                    args::check(args, $sig, $params)?;
                    cfg.set_maybe_null(true);
                    <$state as State>::new(cfg).map(Self)
                })
            }

            fn process<'a>(
                &'a mut self,
                _cfg: &UdfCfg<Process>,
                args: &ArgList<Process>,
                _error: Option<NonZeroU8>,
            ) -> Result<Self::Returns<'a>, ProcessError> {
                process_guard($sig, move || $row(&mut self.0, args))
            }
        }
    )*};
}

const SIG_SHARD_GENE: &str = "id_gen_shard_gene(owner)";
const SIG_SHARD_OF: &str = "id_gen_shard_of(id)";
const SIG_SEQ_OF: &str = "id_gen_seq_of(id)";
const SIG_COMPOSE_ID: &str = "id_gen_compose_id(gene, seq)";
const SIG_ENCODE: &str = "id_gen_encode_order_no(order_id)";
const SIG_ENCODE_BIN: &str = "id_gen_encode_order_no_bin(order_id)";
const SIG_DECODE: &str = "id_gen_decode_order_no(order_no)";

type Row<T> = Result<Option<T>, Fail>;

fn shard_gene_row(_: &mut (), args: &ArgList<Process>) -> Row<i64> {
    match args::get(args, 0) {
        Arg::Null => Ok(None),
        Arg::Int(owner) => Ok(Some(i64::from(gene::gene_of_i64(owner)))),
        Arg::Bytes(owner) => Ok(Some(i64::from(gene::gene_of_bytes(owner)))),
        Arg::Other(t) => Err(args::wrong_type(SIG_SHARD_GENE, 0, Param::IntOrBytes, t)),
    }
}

fn shard_of_row(_: &mut (), args: &ArgList<Process>) -> Row<i64> {
    Ok(args::id_parts(SIG_SHARD_OF, args::get(args, 0))?.map(|(g, _)| i64::from(g)))
}

fn seq_of_row(_: &mut (), args: &ArgList<Process>) -> Row<i64> {
    let Some((_, seq)) = args::id_parts(SIG_SEQ_OF, args::get(args, 0))? else {
        return Ok(None);
    };
    i64::try_from(seq).map(Some).map_err(|_| {
        Fail::Error(
            Errno::OutOfRange,
            format!("id_gen: sequence value {seq} of this 16-byte id does not fit a BIGINT"),
        )
    })
}

fn compose_id_row(_: &mut (), args: &ArgList<Process>) -> Row<i64> {
    let gene = args::int(SIG_COMPOSE_ID, 0, args::get(args, 0))?;
    let seq = args::int(SIG_COMPOSE_ID, 1, args::get(args, 1))?;
    let (Some(gene), Some(seq)) = (gene, seq) else {
        return Ok(None);
    };
    layout::compose(gene, seq)
        .map(Some)
        .map_err(args::layout_fail)
}

/// The order number of the id in argument 0 under the current key version, in the output
/// form `form` makes of its 16 bytes.
fn encode_into<'a, const N: usize>(
    e: &'a mut Encoder<N>,
    sig: &str,
    args: &ArgList<Process>,
    form: fn(&[u8; 16]) -> [u8; N],
) -> Row<&'a [u8]> {
    let Some((gene, seq)) = args::id_parts(sig, args::get(args, 0))? else {
        return Ok(None);
    };
    e.out = form(&e.keys.get()?.encode(gene, seq)?);
    Ok(Some(&e.out[..]))
}

fn encode_row<'a>(e: &'a mut Encoder<36>, args: &ArgList<Process>) -> Row<&'a [u8]> {
    encode_into(e, SIG_ENCODE, args, keys::uuid_text)
}

fn encode_bin_row<'a>(e: &'a mut Encoder<16>, args: &ArgList<Process>) -> Row<&'a [u8]> {
    encode_into(e, SIG_ENCODE_BIN, args, |b| *b)
}

fn decode_row(keys: &mut Keys, args: &ArgList<Process>) -> Row<i64> {
    let s = match args::get(args, 0) {
        Arg::Null => return Ok(None),
        Arg::Bytes(s) => s,
        Arg::Int(_) => return Err(args::wrong_type(SIG_DECODE, 0, Param::Bytes, "INTEGER")),
        Arg::Other(t) => return Err(args::wrong_type(SIG_DECODE, 0, Param::Bytes, t)),
    };
    let Some(no) = keys::parse_order_no(s) else {
        return Err(Fail::Warn(
            Errno::WrongValue,
            format!(
                "id_gen: not a valid order number (a {}-byte value; expected the 36-character UUID text, 32 hex digits or 16 bytes)",
                s.len()
            ),
        ));
    };
    keys.get()?.decode(&no).map(Some)
}

udfs! {
    /// `id_gen_shard_gene(owner)`: the gene of an owner key.
    ShardGene("id_gen_shard_gene", SIG_SHARD_GENE, &[Param::IntOrBytes])
        -> [Option<i64>] () = shard_gene_row;
    /// `id_gen_shard_of(id)`: the gene inside an id.
    ShardOf("id_gen_shard_of", SIG_SHARD_OF, &[Param::IntOrBytes])
        -> [Option<i64>] () = shard_of_row;
    /// `id_gen_seq_of(id)`: the sequence part of an id.
    SeqOf("id_gen_seq_of", SIG_SEQ_OF, &[Param::IntOrBytes])
        -> [Option<i64>] () = seq_of_row;
    /// `id_gen_compose_id(gene, seq)`: `gene << 47 | seq`, range-checked (an error, never
    /// a wrapped id).
    ComposeId("id_gen_compose_id", SIG_COMPOSE_ID, &[Param::Int, Param::Int])
        -> [Option<i64>] () = compose_id_row;
    /// `id_gen_encode_order_no(order_id)`: the order number as UUID text.
    EncodeOrderNo("id_gen_encode_order_no", SIG_ENCODE, &[Param::IntOrBytes])
        -> [Option<&'a [u8]>] Encoder<36> = encode_row;
    /// `id_gen_encode_order_no_bin(order_id)`: the order number as 16 bytes.
    EncodeOrderNoBin("id_gen_encode_order_no_bin", SIG_ENCODE_BIN, &[Param::IntOrBytes])
        -> [Option<&'a [u8]>] Encoder<16> = encode_bin_row;
    /// `id_gen_decode_order_no(order_no)`: the order id of an order number (text or 16
    /// bytes); anything else is NULL with a warning.
    DecodeOrderNo("id_gen_decode_order_no", SIG_DECODE, &[Param::Bytes])
        -> [Option<i64>] Keys = decode_row;
}

#[cfg(test)]
mod tests {
    use super::*;
    use udf::mock::*;
    use udf::mock_args;

    fn run<U: for<'a> BasicUdf<Returns<'a> = Option<i64>>>(
        mut list: MockArgList,
    ) -> Result<Result<Option<i64>, ProcessError>, String> {
        let mut cfg = MockUdfCfg::new();
        let mut u = U::init(cfg.as_init(), list.as_init())?;
        Ok(u.process(cfg.as_process(), list.as_process(), None))
    }

    #[test]
    fn genes_match_the_check_values() {
        let g = |l| run::<ShardGene>(l).unwrap().unwrap();
        assert_eq!(g(mock_args![(42i64, "o", false)]), Some(16043));
        assert_eq!(g(mock_args![(0i64, "o", false)]), Some(55408));
        assert_eq!(g(mock_args![("alice", "o", false)]), Some(13795));
        assert_eq!(g(mock_args![("42", "o", false)]), Some(3541));
        assert_eq!(g(mock_args![(Int None, "o", true)]), None);
        assert_eq!(g(mock_args![(String None, "o", true)]), None);
        let e = run::<ShardGene>(mock_args![(1.5f64, "o", false)]).unwrap_err();
        assert_eq!(
            e,
            "argument 1 (owner) must be an INTEGER or a string, got REAL"
        );
        let e = run::<ShardGene>(mock_args![(1i64, "a", false), (2i64, "b", false)]).unwrap_err();
        assert_eq!(e, "id_gen_shard_gene(owner) takes 1 argument, got 2");
        assert!(run::<ShardGene>(mock_args![]).is_err());
    }

    #[test]
    fn layout_functions() {
        let id = layout::compose(16043, 99).unwrap();
        let b = id.to_be_bytes();
        assert_eq!(
            run::<ShardOf>(mock_args![(id, "i", false)]).unwrap(),
            Ok(Some(16043))
        );
        assert_eq!(
            run::<ShardOf>(mock_args![(&b[..], "i", false)]).unwrap(),
            Ok(Some(16043))
        );
        assert_eq!(
            run::<SeqOf>(mock_args![(id, "i", false)]).unwrap(),
            Ok(Some(99))
        );
        let c = |g: i64, s: i64| {
            run::<ComposeId>(mock_args![(g, "g", false), (s, "s", false)]).unwrap()
        };
        assert_eq!(c(16043, 99), Ok(Some(id)));
        assert_eq!(c(0, (1 << 47) - 1), Ok(Some((1 << 47) - 1)));
        report::take_reported();
        assert_eq!(
            c(1, 1 << 47),
            Err(ProcessError),
            "past 2^47-1: an error, not a wrapped id"
        );
        assert_eq!(c(65536, 1), Err(ProcessError));
        assert_eq!(c(-1, 1), Err(ProcessError));
        let rep = report::take_reported();
        assert!(
            rep.iter().all(|(w, n, _)| !w && *n == Errno::OutOfRange),
            "{rep:?}"
        );
        let e = run::<ComposeId>(mock_args![(Decimal "1.5", "g", false), (1i64, "s", false)]);
        assert!(e
            .unwrap_err()
            .contains("argument 1 (gene) must be an INTEGER, got DECIMAL"));
        let e = run::<ComposeId>(mock_args![("5", "g", false), (1i64, "s", false)]);
        assert!(e
            .unwrap_err()
            .contains("argument 1 (gene) must be an INTEGER, got string"));
        assert_eq!(
            run::<ComposeId>(mock_args![(String None, "g", true), (1i64, "s", false)]).unwrap(),
            Ok(None)
        );
        assert_eq!(
            run::<SeqOf>(mock_args![(&[0u8; 9][..], "i", false)]).unwrap(),
            Err(ProcessError)
        );
        let wide = layout::compose_bytes(7, 1 << 100).unwrap();
        assert_eq!(
            run::<SeqOf>(mock_args![(&wide[..], "i", false)]).unwrap(),
            Err(ProcessError)
        );
        assert_eq!(
            run::<ShardOf>(mock_args![(&wide[..], "i", false)]).unwrap(),
            Ok(Some(7))
        );
    }

    #[test]
    fn decode_refuses_integers_at_init() {
        let e = run::<DecodeOrderNo>(mock_args![(5i64, "n", false)]).unwrap_err();
        assert!(
            e.contains("argument 1 (order_no) must be a string, got INTEGER"),
            "{e}"
        );
    }
}
