//! Strimzi: the generated `KafkaConnector` and `KafkaConnect` read by
//! Strimzi's own API model (`io.strimzi:api`, through
//! `tests/jvm/StrimziModel.java`), and the connector's `config` equal to the
//! Kafka Connect target's, key for key.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn strimzi_model(files: &[PathBuf]) -> Output {
    let services_sh = std::env::var("OUTBOX_TEST_SERVICES")
        .expect("OUTBOX_TEST_SERVICES from scripts/services.sh env");
    Command::new("bash")
        .arg(services_sh)
        .arg("strimzi-model")
        .args(files)
        .output()
        .unwrap()
}

/// What the model understood, one JSON document per resource.
fn read_with_the_model(files: &[PathBuf]) -> Vec<serde_json::Value> {
    let out = strimzi_model(files);
    assert!(
        out.status.success(),
        "Strimzi's model refused the generated resources:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A JSON object of strings, as a map.
fn strings(object: &serde_json::Value) -> BTreeMap<String, String> {
    object
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect()
}

fn committed(name: &str) -> PathBuf {
    root().join("connector-config").join(name)
}

#[test]
fn strimzi_reads_the_kafkaconnector_and_its_config_is_the_connect_configuration() {
    let _services = require_services!();
    let docs = read_with_the_model(&[committed("outbox-cdc.kafkaconnector.yaml")]);
    assert_eq!(docs.len(), 1);
    let connector = &docs[0];
    assert_eq!(connector["kind"], "KafkaConnector");
    assert_eq!(connector["metadata"]["name"], "outbox-cdc-debezium");
    assert_eq!(
        connector["metadata"]["labels"]["strimzi.io/cluster"],
        "outbox-cdc-connect"
    );
    let spec = &connector["spec"];
    assert_eq!(
        spec["class"],
        "io.debezium.connector.postgresql.PostgresConnector"
    );
    assert_eq!(spec["tasksMax"], 1);

    // Strimzi's config plus its two spec fields is Kafka Connect's config.
    let mut strimzi = strings(&spec["config"]);
    strimzi.insert(
        "connector.class".into(),
        spec["class"].as_str().unwrap().into(),
    );
    strimzi.insert("tasks.max".into(), spec["tasksMax"].to_string());
    let rest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(committed("outbox-cdc.json")).unwrap())
            .unwrap();
    let connect = strings(&rest["config"]);
    assert_eq!(strimzi, connect);
    assert_eq!(connector["metadata"]["name"], rest["name"]);
    assert_eq!(
        strimzi["database.password"],
        "${env:OUTBOX_CDC_POSTGRES_PASSWORD}"
    );
}

#[test]
fn strimzi_reads_the_kafkaconnect_that_builds_the_debezium_the_tests_run() {
    let _services = require_services!();
    let docs = read_with_the_model(&[committed("outbox-cdc.kafkaconnect.yaml")]);
    assert_eq!(docs.len(), 1);
    let connect = &docs[0];
    assert_eq!(connect["kind"], "KafkaConnect");
    assert_eq!(connect["metadata"]["name"], "outbox-cdc-connect");
    assert_eq!(
        connect["metadata"]["annotations"]["strimzi.io/use-connector-resources"],
        "true"
    );
    let spec = &connect["spec"];
    let artifact = &spec["build"]["plugins"][0]["artifacts"][0];
    assert_eq!(artifact["type"], "maven");
    assert_eq!(artifact["group"], "io.debezium");
    assert_eq!(artifact["artifact"], "debezium-connector-postgres");
    // The same release the Connect and Server tests run (scripts/pom.xml).
    let pom = std::fs::read_to_string(root().join("scripts/pom.xml")).unwrap();
    let version = artifact["version"].as_str().unwrap();
    assert_eq!(version, "3.6.1.Final");
    assert!(pom.contains(&format!("<debezium.version>{version}</debezium.version>")));
    // The connector's ${env:OUTBOX_CDC_POSTGRES_PASSWORD}, from a Secret.
    assert_eq!(spec["config"]["config.providers"], "env");
    assert_eq!(
        spec["config"]["config.providers.env.class"],
        "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
    );
    let env = &spec["template"]["connectContainer"]["env"][0];
    assert_eq!(env["name"], "OUTBOX_CDC_POSTGRES_PASSWORD");
    assert_eq!(
        env["valueFrom"]["secretKeyRef"]["name"],
        "outbox-cdc-postgres"
    );
    assert_eq!(env["valueFrom"]["secretKeyRef"]["key"], "password");
}

/// The model check can fail: a misspelt field, a forbidden setting and an
/// unserved version are each named.
#[test]
fn strimzi_refuses_what_its_model_does_not_know() {
    let _services = require_services!();
    let dir = std::env::temp_dir().join(format!("outbox-cdc-strimzi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let connector = std::fs::read_to_string(committed("outbox-cdc.kafkaconnector.yaml")).unwrap();
    let broken = connector
        .replace("  tasksMax: 1\n", "  taskMax: 1\n")
        .replace(
            "    plugin.name:",
            "    connector.class: \"io.debezium.connector.postgresql.PostgresConnector\"\n    plugin.name:",
        )
        .replace("kafka.strimzi.io/v1\"", "kafka.strimzi.io/v2\"");
    assert_ne!(broken, connector);
    let connect = std::fs::read_to_string(committed("outbox-cdc.kafkaconnect.yaml")).unwrap();
    let broken_connect = connect.replace("secretKeyRef:", "secretKeyRf:");
    assert_ne!(broken_connect, connect);
    let files = [dir.join("connector.yaml"), dir.join("connect.yaml")];
    std::fs::write(&files[0], broken).unwrap();
    std::fs::write(&files[1], broken_connect).unwrap();
    let out = strimzi_model(&files);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for expected in [
        "fields the model does not know: [taskMax]",
        "spec.config.connector.class is forbidden by Strimzi",
        "apiVersion kafka.strimzi.io/v2 is not among",
        "valueFrom has fields the model does not know: [secretKeyRf]",
    ] {
        assert!(stderr.contains(expected), "{expected}: {stderr}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}
