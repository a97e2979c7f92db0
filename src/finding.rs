//! One thing checked, with a code when it is not ok: what the preflight
//! rules (`pg::checks`, `pg::grants`, `pg::failover`, `kafka::probe`) give,
//! `check` reports, and `run` obeys by stopping on the first error. A leaf:
//! the rules and the report both depend on it, it on neither.

use serde::Serialize;

use crate::error::{Code, Error};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warn,
    Error,
}

/// One thing checked, with a code when it is not ok.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub check: &'static str,
    pub level: Level,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<Code>,
    pub detail: String,
}

impl Finding {
    pub fn ok(check: &'static str, detail: impl Into<String>) -> Finding {
        Finding {
            check,
            level: Level::Ok,
            code: None,
            detail: detail.into(),
        }
    }

    pub fn warn(check: &'static str, code: Code, detail: impl Into<String>) -> Finding {
        Finding {
            check,
            level: Level::Warn,
            code: Some(code),
            detail: detail.into(),
        }
    }

    pub fn error(check: &'static str, code: Code, detail: impl Into<String>) -> Finding {
        Finding {
            check,
            level: Level::Error,
            code: Some(code),
            detail: detail.into(),
        }
    }

    /// A failure as a finding: its code, and its message without the code.
    pub fn failed(check: &'static str, e: &Error) -> Finding {
        Finding::error(check, e.code(), e.detail())
    }

    /// `Err` for an error-level finding: how `run` applies a rule.
    pub fn into_result(self) -> Result<(), Error> {
        match (self.level, self.code) {
            (Level::Error, Some(code)) => Err(Error::new(code, self.detail)),
            _ => Ok(()),
        }
    }
}

/// The first error among `findings`, as an [`Error`].
pub fn first_error(findings: impl IntoIterator<Item = Finding>) -> Result<(), Error> {
    findings.into_iter().try_for_each(Finding::into_result)
}
