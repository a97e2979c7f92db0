//! The one relay of an outbox, as its database declares it: the slot that
//! holds the outbox and the database system it was declared on, the copies
//! declared beside it, and the slots that really stream the outbox's
//! table. For every contract; only `cutover` (the takeover and the
//! hand-back among it) moves the declaration, and a relay claims an
//! undeclared outbox at its first start. The rules that judge these facts
//! live in `pg::checks::ownership`.

use tokio_postgres::Client;

use super::sqlstate::query_error;
use crate::config::OutboxConfig;
use crate::contract::outbox::objects;
use crate::error::{Code, Error};

fn query(context: &'static str) -> impl Fn(tokio_postgres::Error) -> Error {
    move |e| query_error(Code::PG_QUERY_FAILED)(e).context(context)
}

/// What publishes through a declared slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holder {
    /// outbox-cdc, from `postgres.slot`.
    OutboxCdc,
    /// A Debezium connector, from `debezium.slot` (after a hand-back, or
    /// before a takeover).
    Debezium,
}

impl Holder {
    fn as_str(self) -> &'static str {
        match self {
            Holder::OutboxCdc => "OUTBOX_CDC",
            Holder::Debezium => "DEBEZIUM",
        }
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Holder::OutboxCdc => "outbox-cdc",
            Holder::Debezium => "Debezium",
        }
    }
}

/// The role a copy is declared with.
const COPY: &str = "COPY";

/// The slot that holds an outbox, as declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) holder: Holder,
    pub(crate) slot: String,
    pub(crate) system: String,
    pub(crate) changed_by: String,
    pub(crate) changed_at: String,
    pub(crate) reason: Option<String>,
}

impl Held {
    /// `slot s (outbox-cdc, declared by u at t: why)`, for messages.
    pub(crate) fn describe(&self) -> String {
        format!(
            "slot {} ({}, declared by {} at {}{})",
            self.slot,
            self.holder.describe(),
            self.changed_by,
            self.changed_at,
            self.reason
                .as_deref()
                .map_or_else(String::new, |r| format!(": {r}"))
        )
    }
}

/// The outbox's declaration: its relay (`None`: undeclared) and the slots
/// of its declared copies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Declaration {
    pub(crate) held: Option<Held>,
    pub(crate) copies: Vec<String>,
}

impl Declaration {
    /// Whether `slot` is the declared relay's or a declared copy's.
    pub(crate) fn knows(&self, slot: &str) -> bool {
        self.held.as_ref().is_some_and(|h| h.slot == slot) || self.copies.iter().any(|c| c == slot)
    }
}

fn table(outbox: &OutboxConfig) -> String {
    format!("{}.{}", outbox.schema, objects::RELAY_DECLARATION_TABLE)
}

/// The outbox's declaration; `DECLARATION_MISSING` before `migrate` made
/// its table.
pub(crate) async fn read(client: &Client, outbox: &OutboxConfig) -> Result<Declaration, Error> {
    let rows = client
        .query(
            &format!(
                "SELECT slot, role, system_identifier, changed_by, changed_at::text, reason
                   FROM {} WHERE outbox_table = $1 ORDER BY slot",
                table(outbox)
            ),
            &[&outbox.qualified_table()],
        )
        .await
        .map_err(|e| {
            if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) {
                Error::new(
                    Code::DECLARATION_MISSING,
                    format!(
                        "{} does not exist: `outbox-cdc migrate` makes it",
                        table(outbox)
                    ),
                )
            } else {
                query("reading the relay declaration")(e)
            }
        })?;
    let mut declaration = Declaration::default();
    for r in rows {
        let slot: String = r.get(0);
        let role: &str = r.get(1);
        let Some(holder) = [Holder::OutboxCdc, Holder::Debezium]
            .into_iter()
            .find(|h| h.as_str() == role)
        else {
            declaration.copies.push(slot);
            continue;
        };
        declaration.held = Some(Held {
            holder,
            slot,
            system: r.get(2),
            changed_by: r.get(3),
            changed_at: r.get(4),
            reason: r.get(5),
        });
    }
    Ok(declaration)
}

/// The database system's identifier, as `IDENTIFY_SYSTEM` gives it: the
/// same on a physical standby, another on a restored copy.
pub(crate) async fn system_identifier(client: &Client) -> Result<String, Error> {
    Ok(client
        .query_one(
            "SELECT system_identifier::text FROM pg_control_system()",
            &[],
        )
        .await
        .map_err(query("reading the database system identifier"))?
        .get(0))
}

/// Claims an undeclared outbox for `slot`; the declaration after the claim
/// is returned, so of two relays claiming at once, one finds the other's.
pub(crate) async fn claim(
    client: &Client,
    outbox: &OutboxConfig,
    slot: &str,
    system: &str,
) -> Result<Declaration, Error> {
    client
        .execute(
            &format!(
                "INSERT INTO {} (outbox_table, slot, role, system_identifier, reason)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                table(outbox)
            ),
            &[
                &outbox.qualified_table(),
                &slot,
                &Holder::OutboxCdc.as_str(),
                &system,
                &"claimed at the first start of the relay on an undeclared outbox",
            ],
        )
        .await
        .map_err(query("claiming the outbox"))?;
    read(client, outbox).await
}

/// Declares `slot` the outbox's one relay (a copy of the same slot is no
/// longer one), whatever held it before: `cutover`'s step.
pub(crate) async fn declare(
    client: &Client,
    outbox: &OutboxConfig,
    holder: Holder,
    slot: &str,
    reason: &str,
) -> Result<(), Error> {
    let system = system_identifier(client).await?;
    let (t, outbox_table) = (table(outbox), outbox.qualified_table());
    let failed = query("declaring the outbox's relay");
    // A copy of the slot is one no longer; the holder's row is moved in
    // place (the unique index allows one), or made.
    client
        .execute(
            &format!("DELETE FROM {t} WHERE outbox_table = $1 AND role = '{COPY}' AND slot = $2"),
            &[&outbox_table, &slot],
        )
        .await
        .map_err(&failed)?;
    let moved = client
        .execute(
            &format!(
                "UPDATE {t} SET slot = $2, role = $3, system_identifier = $4, changed_by = current_user,
                        changed_at = now(), reason = $5
                  WHERE outbox_table = $1 AND role <> '{COPY}'"
            ),
            &[&outbox_table, &slot, &holder.as_str(), &system, &reason],
        )
        .await
        .map_err(&failed)?;
    if moved == 0 {
        client
            .execute(
                &format!(
                    "INSERT INTO {t} (outbox_table, slot, role, system_identifier, reason)
                     VALUES ($1, $2, $3, $4, $5)"
                ),
                &[&outbox_table, &slot, &holder.as_str(), &system, &reason],
            )
            .await
            .map_err(&failed)?;
    }
    Ok(())
}

/// The outbox is no longer published by change data capture (`cutover
/// --to polling`): no slot holds it.
pub(crate) async fn release(client: &Client, outbox: &OutboxConfig) -> Result<(), Error> {
    client
        .execute(
            &format!(
                "DELETE FROM {} WHERE outbox_table = $1 AND role <> '{COPY}'",
                table(outbox)
            ),
            &[&outbox.qualified_table()],
        )
        .await
        .map_err(query("releasing the outbox's declaration"))?;
    Ok(())
}

/// Declares `slot` a copy beside the outbox's relay. A slot that holds the
/// outbox is never made a copy.
pub(crate) async fn declare_copy(
    client: &Client,
    outbox: &OutboxConfig,
    slot: &str,
    system: &str,
) -> Result<(), Error> {
    client
        .execute(
            &format!(
                "INSERT INTO {t} (outbox_table, slot, role, system_identifier, reason)
                 VALUES ($1, $2, '{COPY}', $3, 'a copy that records nothing (relay.role = copy)')
                 ON CONFLICT (outbox_table, slot) DO UPDATE
                 SET changed_by = current_user, changed_at = now()
                 WHERE {t}.role = '{COPY}'",
                t = table(outbox)
            ),
            &[&outbox.qualified_table(), &slot, &system],
        )
        .await
        .map_err(query("declaring a copy"))?;
    Ok(())
}

/// How sure it is that a slot streams the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reads {
    /// pgoutput, for publications that include the outbox's table.
    Publications(Vec<String>),
    /// A plugin that decodes every table (decoderbufs, wal2json): its
    /// client's own filter decides.
    Everything(String),
    /// Its replication command is hidden from this role.
    Unknown,
}

/// An active logical slot of the database that may stream the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reader {
    pub(crate) slot: String,
    pub(crate) pid: Option<i32>,
    pub(crate) user: Option<String>,
    pub(crate) address: Option<String>,
    pub(crate) reads: Reads,
}

impl Reader {
    /// `slot s (pid 1, user u from a)`, for messages.
    pub(crate) fn describe(&self) -> String {
        let mut about = Vec::new();
        if let Some(pid) = self.pid {
            about.push(format!("pid {pid}"));
        }
        if let Some(u) = &self.user {
            about.push(format!("user {u}"));
        }
        if let Some(a) = &self.address {
            about.push(format!("from {a}"));
        }
        format!("slot {} ({})", self.slot, about.join(", "))
    }
}

/// The active logical slots of this database that may stream the outbox:
/// a pgoutput slot only when its publications include the table (read
/// from its walsender's `START_REPLICATION`, which needs the same role,
/// `pg_read_all_stats` or a superuser to see).
pub(crate) async fn readers(client: &Client, outbox: &OutboxConfig) -> Result<Vec<Reader>, Error> {
    let including: Vec<String> = client
        .query(
            "SELECT pubname::text FROM pg_publication_tables WHERE schemaname = $1 AND tablename = $2",
            &[&outbox.schema, &outbox.table],
        )
        .await
        .map_err(query("reading the publications of the outbox"))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let rows = client
        .query(
            "SELECT s.slot_name::text, s.plugin::text, s.active_pid, a.usename::text,
                    a.client_addr::text, a.query
               FROM pg_replication_slots s
               LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid
              WHERE s.slot_type = 'logical' AND s.active AND s.database = current_database()
              ORDER BY s.slot_name",
            &[],
        )
        .await
        .map_err(query("reading the active slots"))?;
    let mut out = Vec::new();
    for r in rows {
        let plugin: Option<String> = r.get(1);
        let command: Option<String> = r.get(5);
        let reads = match (
            plugin.as_deref(),
            command.as_deref().and_then(publication_names),
        ) {
            (Some("pgoutput"), Some(names)) => {
                let named: Vec<String> = names
                    .into_iter()
                    .filter(|n| including.contains(n))
                    .collect();
                if named.is_empty() {
                    continue;
                }
                Reads::Publications(named)
            }
            (Some("pgoutput"), None) => Reads::Unknown,
            (other, _) => Reads::Everything(other.unwrap_or("no plugin").to_string()),
        };
        out.push(Reader {
            slot: r.get(0),
            pid: r.get(2),
            user: r.get(3),
            address: r.get(4),
            reads,
        });
    }
    Ok(out)
}

/// The publications a `START_REPLICATION` command names (`None`: no such
/// command, as when the role may not see it). Clients quote the option's
/// name or not (`"publication_names" 'a,"B"'`), and the list's names as
/// identifiers.
pub(crate) fn publication_names(command: &str) -> Option<Vec<String>> {
    let lower = command.to_ascii_lowercase();
    if !lower.trim_start().starts_with("start_replication") {
        return None;
    }
    let at = lower.find("publication_names")? + "publication_names".len();
    let rest = command.get(at..)?.trim_start_matches('"').trim_start();
    let rest = rest.strip_prefix('\'')?;
    // A literal: '' is a quote inside it.
    let mut literal = String::new();
    let mut chars = rest.chars().peekable();
    loop {
        match chars.next()? {
            '\'' if chars.peek() == Some(&'\'') => {
                chars.next();
                literal.push('\'');
            }
            '\'' => break,
            c => literal.push(c),
        }
    }
    Some(split_identifiers(&literal))
}

/// `a, "B c"` as PostgreSQL reads an identifier list: unquoted names fold
/// to lower case, quoted ones keep theirs (`""` a quote inside).
fn split_identifiers(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = list.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut name = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '"' if chars.peek() == Some(&'"') => {
                        chars.next();
                        name.push('"');
                    }
                    '"' => break,
                    c => name.push(c),
                }
            }
            while chars.peek().is_some_and(|c| *c != ',') {
                chars.next();
            }
        } else {
            while let Some(c) = chars.peek().copied() {
                if c == ',' {
                    break;
                }
                name.push(c.to_ascii_lowercase());
                chars.next();
            }
            name = name.trim_end().to_string();
        }
        if !name.is_empty() {
            out.push(name);
        }
        if chars.next().is_none() {
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_publications_of_a_start_replication_command_are_read_as_postgresql_reads_them() {
        // The relay's and pgjdbc's (Debezium's) forms, and libpq's.
        let cases = [
            (
                r#"START_REPLICATION SLOT "s" LOGICAL 0/0 ("proto_version" '1', "publication_names" 'outbox_pub')"#,
                vec!["outbox_pub"],
            ),
            (
                r#"START_REPLICATION SLOT debezium LOGICAL 0/16B6F50 ("proto_version" '1', "publication_names" 'dbz_publication,"Mixed Case"')"#,
                vec!["dbz_publication", "Mixed Case"],
            ),
            (
                "start_replication slot x logical 0/1 (proto_version '2', publication_names 'A, b''c')",
                vec!["a", "b'c"],
            ),
        ];
        for (command, expected) in cases {
            assert_eq!(
                publication_names(command),
                Some(expected.iter().map(|s| s.to_string()).collect()),
                "{command}"
            );
        }
        assert_eq!(publication_names("<insufficient privilege>"), None);
        assert_eq!(publication_names("IDENTIFY_SYSTEM"), None);
        assert_eq!(
            publication_names(r#"START_REPLICATION SLOT "s" LOGICAL 0/0 ("include-xids" '1')"#),
            None
        );
    }

    #[test]
    fn a_slot_is_known_when_it_holds_the_outbox_or_is_a_declared_copy() {
        let d = Declaration {
            held: Some(Held {
                holder: Holder::OutboxCdc,
                slot: "relay".into(),
                system: "1".into(),
                changed_by: "u".into(),
                changed_at: "t".into(),
                reason: None,
            }),
            copies: vec!["shadow".into()],
        };
        assert!(d.knows("relay"));
        assert!(d.knows("shadow"));
        assert!(!d.knows("debezium"));
        assert!(!Declaration::default().knows("relay"));
    }
}
