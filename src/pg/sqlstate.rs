//! PostgreSQL failures turned into codes: by SQLSTATE and by the kind of
//! client error, never by message text (which follows `lc_messages`).

use super::tls;
use crate::error::{Cause, Code, Error};

/// The fields of an ErrorResponse that a report needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ServerError {
    pub(crate) sqlstate: String,
    pub(crate) message: String,
    pub(crate) detail: Option<String>,
    pub(crate) hint: Option<String>,
}

impl std::fmt::Display for ServerError {
    /// The server's own words, then the SQLSTATE: `message (SQLSTATE x): detail; hint`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (SQLSTATE {})", self.message, self.sqlstate)?;
        if let Some(d) = &self.detail {
            write!(f, ": {d}")?;
        }
        if let Some(h) = &self.hint {
            write!(f, "; {h}")?;
        }
        Ok(())
    }
}

/// The connection is gone or the server cannot serve now: connection
/// exceptions, operator intervention (shutdown, restart) and insufficient
/// resources (too many connections, out of memory, disk full).
pub(crate) fn is_transient(sqlstate: &str) -> bool {
    sqlstate.starts_with("08") || sqlstate.starts_with("57P") || sqlstate.starts_with("53")
}

/// When in a connection's life a failure happened: the same SQLSTATE means
/// "cannot connect" during log-in and "lost it" afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Connecting,
    Connected,
}

/// The code for a server error, or `None` when the caller's own code for a
/// refused statement applies.
pub(crate) fn code_for(sqlstate: &str, phase: Phase) -> Option<Code> {
    Some(match sqlstate {
        // Invalid password; invalid authorization (unknown role, no
        // pg_hba.conf entry).
        "28P01" | "28000" => Code::PG_AUTH_FAILED,
        "42501" => Code::PG_PERMISSION_DENIED,
        // A database that does not exist: cannot connect.
        "3D000" if phase == Phase::Connecting => Code::PG_CONNECT_FAILED,
        // Serialization failure, deadlock, lock not available, a statement
        // timeout or cancel: the same statement may pass next time.
        "40001" | "40P01" | "55P03" | "57014" if phase == Phase::Connected => {
            Code::PG_STATEMENT_CONFLICT
        }
        s if is_transient(s) => match phase {
            Phase::Connecting => Code::PG_CONNECT_FAILED,
            Phase::Connected => Code::PG_CONNECTION_LOST,
        },
        _ => return None,
    })
}

/// A tokio-postgres failure as an [`Error`]: the server's message and
/// SQLSTATE, or the I/O error beneath "error connecting to server".
/// `refused` is the code for a statement the server refused for a reason of
/// its own (e.g. `ROW_MARKING_FAILED`).
pub(crate) fn sql_error(e: &tokio_postgres::Error, phase: Phase, refused: Code) -> Error {
    match e.as_db_error() {
        Some(db) => {
            let server = ServerError {
                sqlstate: db.code().code().to_string(),
                message: db.message().to_string(),
                detail: db.detail().map(str::to_string),
                hint: db.hint().map(str::to_string),
            };
            let code = code_for(&server.sqlstate, phase).unwrap_or(refused);
            Error::new(code, server.to_string()).caused_by(Cause::Sqlstate(server.sqlstate))
        }
        // No SQLSTATE: the socket, TLS or the protocol failed.
        None => {
            let detail = crate::error::chain(e);
            if let Some(r) = tls::refusal(e) {
                return Error::new(Code::PG_TLS_FAILED, detail)
                    .caused_by(Cause::Tls(format!("{r:?}")));
            }
            let code = match phase {
                Phase::Connecting => Code::PG_CONNECT_FAILED,
                Phase::Connected => Code::PG_CONNECTION_LOST,
            };
            let io = std::error::Error::source(e)
                .and_then(|s| s.downcast_ref::<std::io::Error>())
                .map(std::io::Error::kind);
            match io {
                Some(kind) => Error::new(code, detail).caused_by(Cause::Io(kind)),
                None => Error::new(code, detail),
            }
        }
    }
}

/// A statement failure on an open connection: lost connections are
/// transient, anything else the server refused gets `refused`.
pub(crate) fn query_error(refused: Code) -> impl Fn(tokio_postgres::Error) -> Error {
    move |e| sql_error(&e, Phase::Connected, refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_decide_codes_and_phase_decides_connect_or_lost() {
        let cases = [
            ("28P01", Phase::Connecting, Some(Code::PG_AUTH_FAILED)),
            ("28000", Phase::Connecting, Some(Code::PG_AUTH_FAILED)),
            ("42501", Phase::Connected, Some(Code::PG_PERMISSION_DENIED)),
            ("3D000", Phase::Connecting, Some(Code::PG_CONNECT_FAILED)),
            ("53300", Phase::Connecting, Some(Code::PG_CONNECT_FAILED)),
            ("57P03", Phase::Connecting, Some(Code::PG_CONNECT_FAILED)),
            ("57P01", Phase::Connected, Some(Code::PG_CONNECTION_LOST)),
            ("08006", Phase::Connected, Some(Code::PG_CONNECTION_LOST)),
            ("40001", Phase::Connected, Some(Code::PG_STATEMENT_CONFLICT)),
            ("40P01", Phase::Connected, Some(Code::PG_STATEMENT_CONFLICT)),
            ("55P03", Phase::Connected, Some(Code::PG_STATEMENT_CONFLICT)),
            ("57014", Phase::Connected, Some(Code::PG_STATEMENT_CONFLICT)),
            ("42P01", Phase::Connected, None),
            ("23514", Phase::Connected, None),
        ];
        for (state, phase, code) in cases {
            assert_eq!(code_for(state, phase), code, "{state} {phase:?}");
        }
    }

    #[test]
    fn a_server_error_shows_its_words_and_sqlstate_once() {
        let e = ServerError {
            sqlstate: "3D000".into(),
            message: "database \"nope\" does not exist".into(),
            detail: None,
            hint: None,
        };
        assert_eq!(
            e.to_string(),
            "database \"nope\" does not exist (SQLSTATE 3D000)"
        );
    }
}
