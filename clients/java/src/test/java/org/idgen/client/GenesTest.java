// Genes without a server: the check values of docs/routing-protocol.md §1, encodings that look
// right but are wrong, and the 10,000 owners of each type in clients/gene-vectors.json
// (computed by the extension).
package org.idgen.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.junit.jupiter.api.Test;

class GenesTest {
    @Test
    void checkValues() {
        assertEquals(16043, Genes.geneOf(42L));
        assertEquals(55408, Genes.geneOf(0L));
        assertEquals(24031, Genes.geneOf(1L));
        assertEquals(14299, Genes.geneOf(45346343212L));
        assertEquals(13795, Genes.geneOf("alice"));
        assertEquals(16043, Key.owner(42L).gene());
    }

    @Test
    void fortyTwoHashedAnyOtherWayGivesAnotherGene() {
        assertEquals(0xa845, Genes.geneOf(ByteBuffer.allocate(8).putLong(42).array()), "8 bytes big-endian");
        assertEquals(0x0dd5, Genes.geneOf("42"), "its text");
        assertEquals(0x3f3e, Genes.geneOf(ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(42).array()),
                "4 bytes little-endian");
    }

    @Test
    void encodings() {
        assertEquals(Genes.geneOf(new byte[] {-1, -1, -1, -1, -1, -1, -1, -1}), Genes.geneOf(-1L));
        assertEquals(Genes.geneOf(new byte[] {0, 0, 0, 0, 0, 0, 0, (byte) 0x80}), Genes.geneOf(Long.MIN_VALUE));
        assertEquals(Genes.geneOf("é".getBytes(StandardCharsets.UTF_8)), Genes.geneOf("é"));
        UUID u = UUID.fromString("12345678-1234-5678-1234-567812345678");
        assertEquals(Genes.geneOf(new BigInteger("12345678123456781234567812345678", 16).toByteArray()), Genes.geneOf(u));
        // lengths around every block and tail boundary of both hashes
        for (int len = 0; len <= 70; len++) {
            byte[] b = new byte[len];
            int g = Genes.geneOf(b);
            assertTrue(g >= 0 && g <= 0xFFFF);
        }
    }

    @Test
    void theGenesOfTenThousandBigintTextAndUuidOwnersEqualTheExtensions() throws Exception {
        Map<String, Object> vectors = Json.object(Json.readClientsFile("gene-vectors.json"));
        List<String> wrong = new ArrayList<>();
        int count = 0;
        boolean above2to53 = false;
        for (String kind : List.of("bigint", "text", "uuid")) {
            for (Object entry : Json.array(vectors.get(kind))) {
                List<Object> pair = Json.array(entry);
                String owner = (String) pair.get(0);
                long want = (Long) pair.get(1);
                int got;
                if (kind.equals("bigint")) {
                    long value = Long.parseLong(owner);
                    above2to53 |= Math.abs(value) > (1L << 53);
                    got = Genes.geneOf(value);
                } else if (kind.equals("text")) {
                    got = Genes.geneOf(owner);
                } else {
                    got = Genes.geneOf(UUID.fromString(owner));
                }
                count++;
                if (got != want) {
                    wrong.add(kind + " " + owner + ": " + got + " (the extension: " + want + ")");
                }
            }
        }
        assertEquals(30000, count);
        assertEquals(List.of(), wrong.subList(0, Math.min(5, wrong.size())));
        assertTrue(above2to53, "owners beyond 2^53 are among them");
    }

    @Test
    void theGeneOfAnId() {
        long id = (1234L << 47) | 5;
        assertEquals(1234, Genes.geneOfId(id));
        assertEquals(1234, Key.id(id).gene());
        assertEquals(0xFFFF, Genes.geneOfId(Long.MAX_VALUE));
        assertThrows(IllegalArgumentException.class, () -> Genes.geneOfId(-1));
        assertThrows(IllegalArgumentException.class, () -> Key.id(-1));
        assertThrows(IllegalArgumentException.class, () -> Key.gene(65536));
        assertThrows(IllegalArgumentException.class, () -> Key.gene(-1));
        assertEquals(65535, Key.gene(65535).gene());
    }
}
