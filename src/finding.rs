//! One thing checked, with a code when it is not ok: what the preflight
//! rules (`pg::checks`, `pg::grants`, `pg::failover`, `kafka::probe`) give,
//! `check` reports, and `run` and every session obey by stopping on the
//! first error of a rule they obey ([`crate::rules`]). A leaf beside the
//! rule list: the judgements and the report depend on it, it on neither.

use serde::Serialize;

use crate::error::{Code, Error};
use crate::rules::{Rule, When};

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
    /// The rule it judges, by name.
    pub check: Rule,
    pub level: Level,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<Code>,
    pub detail: String,
}

impl Finding {
    pub fn ok(check: Rule, detail: impl Into<String>) -> Finding {
        Finding {
            check,
            level: Level::Ok,
            code: None,
            detail: detail.into(),
        }
    }

    pub fn warn(check: Rule, code: Code, detail: impl Into<String>) -> Finding {
        debug_assert!(check.gives(code), "rule {check} does not list {code}");
        Finding {
            check,
            level: Level::Warn,
            code: Some(code),
            detail: detail.into(),
        }
    }

    pub fn error(check: Rule, code: Code, detail: impl Into<String>) -> Finding {
        debug_assert!(check.gives(code), "rule {check} does not list {code}");
        Finding {
            check,
            level: Level::Error,
            code: Some(code),
            detail: detail.into(),
        }
    }

    /// A failure to read the rule's facts, as a finding: the failure's own
    /// code, and its message without the code.
    pub fn failed(check: Rule, e: &Error) -> Finding {
        Finding {
            check,
            level: Level::Error,
            code: Some(e.code()),
            detail: e.detail().to_string(),
        }
    }

    /// As [`Finding::failed`], as a warning: the facts only inform.
    pub fn unreadable(check: Rule, e: &Error) -> Finding {
        Finding {
            level: Level::Warn,
            ..Finding::failed(check, e)
        }
    }

    /// `Err` for an error-level finding: how `run` applies a rule.
    pub fn into_result(self) -> Result<(), Error> {
        match (self.level, self.code) {
            (Level::Error, Some(code)) => Err(Error::new(code, self.detail)),
            _ => Ok(()),
        }
    }
}

/// The first error among `findings` of a rule `when` obeys, as an
/// [`Error`]: how `run` and a session apply the rules.
pub fn obey(when: When, findings: impl IntoIterator<Item = Finding>) -> Result<(), Error> {
    findings
        .into_iter()
        .filter(|f| f.check.obeyed_by(when))
        .try_for_each(Finding::into_result)
}
