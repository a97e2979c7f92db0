// Reads Strimzi custom resources (YAML) with Strimzi's own API model, the
// classes its operator deserializes them into, and prints what the model
// understood as JSON, one line per document, for the Rust tests to compare.
//
// Fails (exit 1) on anything the model does not know: a field Strimzi would
// keep only as an "additional property" (a misspelt key), a kind or an
// apiVersion its CRDs do not serve, a connector setting Strimzi forbids in
// `config`, or a Connect setting under a prefix it reserves.
//
//   java -cp '<strimzi jars>/*' tests/jvm/StrimziModel.java FILE...

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.dataformat.yaml.YAMLFactory;
import com.fasterxml.jackson.dataformat.yaml.YAMLMapper;
import io.fabric8.kubernetes.client.CustomResource;
import io.strimzi.api.kafka.Crds;
import io.strimzi.api.kafka.model.connect.KafkaConnect;
import io.strimzi.api.kafka.model.connect.KafkaConnectSpec;
import io.strimzi.api.kafka.model.connector.AbstractConnectorSpec;
import io.strimzi.api.kafka.model.connector.KafkaConnector;
import java.io.File;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

public class StrimziModel {
    static final List<String> problems = new ArrayList<>();

    public static void main(String[] args) throws Exception {
        YAMLMapper yaml = YAMLMapper.builder()
                .enable(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES)
                .build();
        ObjectMapper json = JsonMapper.builder().build();
        for (String path : args) {
            for (JsonNode doc : yaml.readValues(yaml.getFactory().createParser(new File(path)), JsonNode.class).readAll()) {
                String kind = doc.path("kind").asText();
                CustomResource<?, ?> resource;
                if (kind.equals(Crds.kind(KafkaConnector.class))) {
                    KafkaConnector c = yaml.treeToValue(doc, KafkaConnector.class);
                    checkVersion(path, doc, KafkaConnector.class);
                    List<String> forbidden = Arrays.asList(AbstractConnectorSpec.FORBIDDEN_PARAMETERS.split(",\\s*"));
                    for (String key : c.getSpec().getConfig().keySet()) {
                        if (forbidden.contains(key)) problems.add(path + ": spec.config." + key + " is forbidden by Strimzi");
                    }
                    resource = c;
                } else if (kind.equals(Crds.kind(KafkaConnect.class))) {
                    KafkaConnect c = yaml.treeToValue(doc, KafkaConnect.class);
                    checkVersion(path, doc, KafkaConnect.class);
                    List<String> forbidden = Arrays.asList(KafkaConnectSpec.FORBIDDEN_PREFIXES.split(",\\s*"));
                    for (String key : c.getSpec().getConfig().keySet()) {
                        for (String prefix : forbidden) {
                            if (key.startsWith(prefix)) problems.add(path + ": spec.config." + key + " is reserved by Strimzi");
                        }
                    }
                    resource = c;
                } else {
                    problems.add(path + ": kind " + kind + " is not a KafkaConnector or KafkaConnect");
                    continue;
                }
                unknown(path, resource, kind, new IdentityHashMap<>());
                System.out.println(json.writeValueAsString(resource));
            }
        }
        if (!problems.isEmpty()) {
            problems.forEach(p -> System.err.println("STRIMZI_MODEL: " + p));
            System.exit(1);
        }
    }

    /** The model reports its own storage version; the document's is checked against the CRD's. */
    static void checkVersion(String path, JsonNode doc, Class<? extends CustomResource> type) {
        List<String> served = Crds.apiVersions(type);
        String version = doc.path("apiVersion").asText();
        if (!served.contains(version)) {
            problems.add(path + ": apiVersion " + version + " is not among " + served);
        }
    }

    /** Walks the model's getters and reports every additional property. */
    static void unknown(String path, Object o, String where, IdentityHashMap<Object, Boolean> seen) throws Exception {
        if (o == null || seen.put(o, true) != null) return;
        if (o instanceof Collection<?> c) {
            int i = 0;
            for (Object item : c) unknown(path, item, where + "[" + i++ + "]", seen);
            return;
        }
        if (o instanceof Map<?, ?>) return; // free-form maps (config, labels)
        String pkg = o.getClass().getPackageName();
        if (!pkg.startsWith("io.strimzi") && !pkg.startsWith("io.fabric8")) return;
        for (Method m : o.getClass().getMethods()) {
            if (m.getParameterCount() != 0 || Modifier.isStatic(m.getModifiers())) continue;
            String name = m.getName();
            if (name.equals("getAdditionalProperties")) {
                Object extra = m.invoke(o);
                if (extra instanceof Map<?, ?> map && !map.isEmpty()) {
                    problems.add(path + ": " + where + " has fields the model does not know: " + map.keySet());
                }
            } else if (name.startsWith("get") && !name.equals("getClass")) {
                Object child;
                try {
                    child = m.invoke(o);
                } catch (Exception e) {
                    continue;
                }
                unknown(path, child, where + "." + Character.toLowerCase(name.charAt(3)) + name.substring(4), seen);
            }
        }
    }
}
