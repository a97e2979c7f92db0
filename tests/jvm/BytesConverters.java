// Debezium 1.x's ByteBufferConverter and 3.6's BinaryDataConverter on the
// same values, each loaded from its own release's jars: prints one line per
// value, `name old-bytes new-bytes` in hex (`null` for a null), for the
// Rust test to compare with each other and with the relay's bytes.
//
//   java -cp '<kafka jars>/*' tests/jvm/BytesConverters.java DEBEZIUM_1X_DIR DEBEZIUM_3X_DIR
//
// The values are what a PostgreSQL column gives the converter: a `bytea`
// (a ByteBuffer under a BYTES schema, as `binary.handling.mode=bytes`
// makes it), a NULL, and other types through the delegate (JsonConverter
// without schemas).

import java.io.File;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.storage.Converter;

public class BytesConverters {
    static Converter load(String dir, String className) throws Exception {
        File[] jars = new File(dir).listFiles((d, n) -> n.endsWith(".jar"));
        if (jars == null || jars.length == 0) {
            throw new IllegalStateException("no jars in " + dir);
        }
        List<URL> urls = new ArrayList<>();
        for (File jar : jars) {
            urls.add(jar.toURI().toURL());
        }
        ClassLoader loader =
            new URLClassLoader(urls.toArray(new URL[0]), BytesConverters.class.getClassLoader());
        Converter c = (Converter) loader.loadClass(className).getDeclaredConstructor().newInstance();
        Map<String, String> config = new HashMap<>();
        config.put("delegate.converter.type", "org.apache.kafka.connect.json.JsonConverter");
        config.put("delegate.converter.type.schemas.enable", "false");
        c.configure(config, false);
        return c;
    }

    static String hex(byte[] bytes) {
        if (bytes == null) {
            return "null";
        }
        StringBuilder out = new StringBuilder();
        for (byte b : bytes) {
            out.append(String.format("%02x", b));
        }
        return out.length() == 0 ? "-" : out.toString();
    }

    public static void main(String[] args) throws Exception {
        Converter old = load(args[0], "io.debezium.converters.ByteBufferConverter");
        Converter now = load(args[1], "io.debezium.converters.BinaryDataConverter");
        byte[] all = new byte[256];
        for (int i = 0; i < 256; i++) {
            all[i] = (byte) i;
        }
        Object[][] values = {
            {"bytes-empty", Schema.BYTES_SCHEMA, ByteBuffer.wrap(new byte[0])},
            {"bytes-all", Schema.BYTES_SCHEMA, ByteBuffer.wrap(all)},
            {"bytes-text", Schema.OPTIONAL_BYTES_SCHEMA,
                ByteBuffer.wrap("{\"a\":1} é".getBytes(StandardCharsets.UTF_8))},
            {"bytes-null", Schema.OPTIONAL_BYTES_SCHEMA, null},
            {"string", Schema.STRING_SCHEMA, "a \"q\" \\"},
            {"int", Schema.INT32_SCHEMA, 42},
            {"string-null", Schema.OPTIONAL_STRING_SCHEMA, null},
        };
        for (Object[] v : values) {
            Schema schema = (Schema) v[1];
            System.out.println(v[0] + " " + hex(old.fromConnectData("t", schema, v[2])) + " "
                + hex(now.fromConnectData("t", schema, v[2])));
        }
    }
}
