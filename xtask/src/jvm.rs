//! What runs on the JVM: the jars of `scripts/pom.xml`'s profiles (Kafka,
//! Debezium's connector, Strimzi's model) resolved by Maven into
//! `.cache/jvm/PROFILE`, Debezium Server's distribution, and the commands
//! that run them in the foreground.

use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::SystemTime;

use anyhow::{anyhow, bail, Context, Result};

use crate::config::Config;
use crate::process::{have, log, run, temp_dir};

/// Our stderr, for a child whose stdout must not reach our stdout.
pub fn to_stderr() -> Result<Stdio> {
    Ok(Stdio::from(std::io::stderr().as_fd().try_clone_to_owned()?))
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Whether `stamp` exists and is newer than `than` (`test -nt`).
fn newer(stamp: &Path, than: &Path) -> bool {
    match (modified(stamp), modified(than)) {
        (Some(a), Some(b)) => a > b,
        (Some(_), None) => true,
        _ => false,
    }
}

fn pom(cfg: &Config) -> PathBuf {
    cfg.scripts().join("pom.xml")
}

/// The jars of one profile of `scripts/pom.xml`, once per change of it.
pub fn install_profile(cfg: &Config, profile: &str) -> Result<()> {
    let dir = cfg.jvm_cache.join(profile);
    if newer(&dir.join(".complete"), &pom(cfg)) {
        return Ok(());
    }
    if !have("java") {
        bail!("java is missing (a JDK 17 or newer is needed for Kafka)");
    }
    if !have("mvn") {
        bail!("mvn is missing (Maven resolves the Kafka jars from Maven Central)");
    }
    log(&format!(
        "resolving the '{profile}' jars from Maven Central into {}",
        dir.display()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    run(
        Command::new("mvn")
            .args([
                "-q",
                "-B",
                &format!("-P{profile}"),
                "dependency:copy-dependencies",
            ])
            .arg(format!("-DoutputDirectory={}", dir.display()))
            .arg("-DincludeScope=runtime")
            .current_dir(cfg.scripts())
            .stdout(to_stderr()?),
        &format!("Maven could not resolve the '{profile}' profile of scripts/pom.xml"),
    )?;
    std::fs::write(dir.join(".complete"), "")?;
    Ok(())
}

/// Kafka's jars, as a class path.
pub fn kafka_classpath(cfg: &Config) -> String {
    format!("{}/*", cfg.jvm_cache.join("kafka").display())
}

/// The distribution's jars that neither the PostgreSQL source nor the Kafka
/// sink load: other databases' drivers, other sinks' clients, other
/// platforms' native libraries. (Every sink's CDI bean is loaded at
/// start-up, so the sinks' own small jars stay.)
pub const DEBEZIUM_SERVER_EXCLUDES: [&str; 30] = [
    "debezium-server/connectors",
    "debezium-server/lib_opt",
    "debezium-server/lib_metrics",
    "*/lib/rocketmq-rocksdb-*",
    "*/lib/pulsar-client-[0-9]*",
    "*/lib/quarkus-ide-launcher-*",
    "*/lib/hibernate-*",
    "*/lib/grpc-*",
    "*/lib/vitess-*",
    "*/lib/bouncy-castle-bc-*",
    "*/lib/bcprov-*",
    "*/lib/bcpkix-*",
    "*/lib/ojdbc*",
    "*/lib/orai18n-*",
    "*/lib/xmlparserv2-*",
    "*/lib/jt400*",
    "*/lib/infinispan-core-*",
    "*/lib/jgroups-*",
    "*/lib/ehcache-*",
    "*/lib/conscrypt-*",
    "*/lib/proto-google-*",
    "*/lib/google-cloud-*",
    "*/lib/mysql-connector-j-*",
    "*/lib/mongodb-driver-*",
    "*/lib/mssql-jdbc-*",
    "*/lib/debezium-ddl-parser-*",
    "*/lib/*-osx-*",
    "*/lib/*-windows-*",
    "*/lib/*-aarch_64.jar",
    "*/lib/*-riscv64.jar",
];

fn find(dir: &Path, prefix: &str, suffix: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(suffix))
        })
        .collect();
    found.sort();
    found.into_iter().next()
}

/// Unpacks what the PostgreSQL source and the Kafka sink need from the
/// distribution (the archive stays in the local Maven repository), again
/// when the pom or the excludes change.
pub fn install_debezium_server(cfg: &Config) -> Result<()> {
    let dir = cfg.jvm_cache.join("debezium-server");
    let stamp = DEBEZIUM_SERVER_EXCLUDES.join("\n");
    let complete = dir.join(".complete");
    if newer(&complete, &pom(cfg)) && std::fs::read_to_string(&complete).ok() == Some(stamp.clone())
    {
        return Ok(());
    }
    if !have("mvn") {
        bail!("mvn is missing (Maven resolves Debezium Server from Maven Central)");
    }
    log(&format!(
        "resolving Debezium Server from Maven Central and unpacking its PostgreSQL source and Kafka sink into {}",
        dir.display()
    ));
    let archives = temp_dir("debezium-server")?;
    let unpacked = unpack_debezium_server(cfg, &archives, &dir);
    let _ = std::fs::remove_dir_all(&archives);
    unpacked?;
    if find(&dir, "debezium-server-dist-", "-runner.jar").is_none() {
        bail!("the Debezium Server distribution has no runner jar");
    }
    std::fs::write(complete, stamp)?;
    Ok(())
}

fn unpack_debezium_server(cfg: &Config, archives: &Path, dir: &Path) -> Result<()> {
    run(
        Command::new("mvn")
            .args([
                "-q",
                "-B",
                "-Pdebezium-server",
                "dependency:copy-dependencies",
            ])
            .arg(format!("-DoutputDirectory={}", archives.display()))
            .arg("-DincludeTypes=tar.gz")
            .current_dir(cfg.scripts())
            .stdout(to_stderr()?),
        "Maven could not resolve the 'debezium-server' profile of scripts/pom.xml",
    )?;
    let archive = find(archives, "debezium-server-dist-", ".tar.gz")
        .ok_or_else(|| anyhow!("Maven left no Debezium Server archive"))?;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    run(
        Command::new("tar")
            .arg("-xzf")
            .arg(&archive)
            .arg("-C")
            .arg(dir)
            .arg("--strip-components=1")
            .args(
                DEBEZIUM_SERVER_EXCLUDES
                    .iter()
                    .map(|p| format!("--exclude={p}")),
            ),
        "cannot unpack the Debezium Server distribution",
    )
}

/// The major Java version a `java -XshowSettings:properties -version`
/// reports.
pub fn java_major(settings: &str) -> Option<u32> {
    settings.lines().find_map(|l| {
        let (key, value) = l.split_once(" = ")?;
        (key.trim() == "java.specification.version")
            .then(|| value.trim().split('.').next()?.parse().ok())
            .flatten()
    })
}

/// Debezium Server 3.6 is built for Java 21; Kafka and Connect run on 17.
fn find_java21(cfg: &Config) -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = ["OUTBOX_TEST_JAVA21_HOME", "JAVA_HOME"]
        .iter()
        .filter_map(|v| cfg.vars.get(v).map(PathBuf::from))
        .collect();
    let mut system: Vec<PathBuf> = std::fs::read_dir("/usr/lib/jvm")
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    system.sort();
    candidates.extend(system);
    candidates.into_iter().find(|home| {
        let java = home.join("bin/java");
        java.is_file()
            && Command::new(&java)
                .args(["-XshowSettings:properties", "-version"])
                .stdin(Stdio::null())
                .output()
                .ok()
                .and_then(|o| java_major(&String::from_utf8_lossy(&o.stderr)))
                .is_some_and(|v| v >= 21)
    })
}

/// The offsets file a Debezium Server configuration names, if any.
pub fn offsets_file(properties: &str) -> Option<&str> {
    properties.lines().find_map(|l| {
        l.strip_prefix("debezium.source.offset.storage.file.filename=")
            .filter(|v| !v.is_empty())
    })
}

/// Runs Debezium Server in the foreground on a generated
/// application.properties, in `workdir` (its offsets file, if any, is
/// relative to it), until signalled: this process becomes the JVM.
pub fn run_debezium_server(cfg: &Config, args: &[String]) -> Result<()> {
    let properties = match args.first() {
        Some(p) if Path::new(p).is_file() => PathBuf::from(p),
        _ => bail!("usage: services.sh debezium-server APPLICATION_PROPERTIES [WORKDIR]"),
    };
    let workdir = args
        .get(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| cfg.state.join("debezium-server"));
    install_debezium_server(cfg)?;
    let dir = cfg.jvm_cache.join("debezium-server");
    let java_home = find_java21(cfg).ok_or_else(|| {
        anyhow!("Debezium Server 3.6 needs Java 21 or newer; set OUTBOX_TEST_JAVA21_HOME to one")
    })?;
    std::fs::create_dir_all(workdir.join("config"))?;
    let text = std::fs::read_to_string(&properties)?;
    std::fs::write(workdir.join("config/application.properties"), &text)?;
    // FileOffsetBackingStore does not create the offsets file's directory; it
    // logs NoSuchFileException on every flush and keeps no position at all.
    if let Some(parent) = offsets_file(&text).and_then(|f| Path::new(f).parent()) {
        std::fs::create_dir_all(workdir.join(parent))?;
    }
    let runner = find(&dir, "debezium-server-dist-", "-runner.jar")
        .ok_or_else(|| anyhow!("the Debezium Server distribution has no runner jar"))?;
    let classpath = format!(
        "{}:{}/config/lib:{}/lib/*",
        runner.display(),
        dir.display(),
        dir.display()
    );
    let mut java = Command::new(java_home.join("bin/java"));
    java.current_dir(&workdir)
        // The generated file resolves the password with Kafka's
        // EnvVarConfigProvider.
        .env(
            "OUTBOX_CDC_POSTGRES_PASSWORD",
            cfg.vars
                .or("OUTBOX_CDC_POSTGRES_PASSWORD", &cfg.pg_password),
        )
        // --add-opens: Quarkus's thread-local reset on Java 24 and newer.
        .args([
            "-Xms128m",
            "-Xmx512m",
            "--add-opens",
            "java.base/java.lang=ALL-UNNAMED",
        ])
        .arg(format!(
            "-Dquarkus.http.port={}",
            cfg.debezium_server_http_port
        ))
        .arg("-Dquarkus.log.console.json.enabled=false")
        .args(["-cp", &classpath, "io.debezium.server.Main"]);
    Err(java.exec()).context("cannot run Debezium Server")
}

/// Strimzi's API model reads the given custom resources
/// (tests/jvm/StrimziModel.java); this process becomes the JVM.
pub fn strimzi_model(cfg: &Config, files: &[String]) -> Result<()> {
    install_profile(cfg, "strimzi")?;
    let classpath = format!("{}/*", cfg.jvm_cache.join("strimzi").display());
    let err = Command::new("java")
        .args(["-cp", &classpath])
        .arg(cfg.repo.join("tests/jvm/StrimziModel.java"))
        .args(files)
        .exec();
    Err(err).context("cannot run java")
}

/// Debezium 1.x's ByteBufferConverter and 3.6's BinaryDataConverter on the
/// same values (tests/jvm/BytesConverters.java); this process becomes the JVM.
pub fn bytes_converters(cfg: &Config) -> Result<()> {
    for profile in ["kafka", "debezium", "debezium1x"] {
        install_profile(cfg, profile)?;
    }
    let classpath = format!("{}/*", cfg.jvm_cache.join("kafka").display());
    let err = Command::new("java")
        .args(["-cp", &classpath])
        .arg(cfg.repo.join("tests/jvm/BytesConverters.java"))
        .arg(cfg.jvm_cache.join("debezium1x"))
        .arg(cfg.jvm_cache.join("debezium"))
        .exec();
    Err(err).context("cannot run java")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_java_specification_version() {
        let settings = "Property settings:\n    java.home = /usr/lib/jvm/x\n    java.specification.version = 21\n";
        assert_eq!(java_major(settings), Some(21));
        assert_eq!(
            java_major("    java.specification.version = 1.8\n"),
            Some(1)
        );
        assert_eq!(
            java_major("    java.specification.version = 17\n"),
            Some(17)
        );
        assert_eq!(java_major("nothing"), None);
    }

    #[test]
    fn finds_the_offsets_file_of_a_configuration() {
        let props = "debezium.sink.type=kafka\ndebezium.source.offset.storage.file.filename=data/offsets.dat\n";
        assert_eq!(offsets_file(props), Some("data/offsets.dat"));
        assert_eq!(
            offsets_file("debezium.source.offset.storage.file.filename=\n"),
            None
        );
        assert_eq!(offsets_file("a=b\n"), None);
    }

    #[test]
    fn a_stamp_older_than_the_pom_is_stale() {
        let dir = temp_dir("newer").unwrap();
        let (old, new) = (dir.join("old"), dir.join("new"));
        std::fs::write(&old, "").unwrap();
        let past = SystemTime::now() - std::time::Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(past)
            .unwrap();
        std::fs::write(&new, "").unwrap();
        assert!(newer(&new, &old));
        assert!(!newer(&old, &new));
        assert!(!newer(&dir.join("missing"), &old));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
