//! A deployment's config expressions, made the relay's references
//! (`config::expressions`) so that a value known only where the connector
//! runs is never copied literally: Kafka Connect's config providers
//! (`${env:NAME}`, `${file:PATH:KEY}`, `${directory:DIR:FILE}`), Debezium
//! Server's `${NAME}` and `${NAME:DEFAULT}` (SmallRye Config reads them
//! from the environment), and the `${NAME}` placeholders a script fills in
//! before it posts a Connect body. What no process of the relay's can read
//! (another provider, a Kubernetes secret, an OpenShift template's
//! parameter without a default) is refused, naming the key.

use super::read::Source;
use crate::config::expressions::{each_expression, is_reference};

/// Why a value cannot become a reference the relay resolves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct AtDeploy {
    pub(super) expression: String,
}

/// `value` with each expression made a reference the relay resolves; the
/// first expression it cannot resolve, otherwise. A router's own
/// `${group}` (in `route.topic.replacement`) is left alone: `router` says
/// the value is one.
pub(super) fn references(value: &str, source: Source, router: Router) -> Result<String, AtDeploy> {
    each_expression(value, |inner, whole| {
        reference(inner, whole, source, router)
    })
}

/// `value` with each reference the relay resolves (as [`references`]
/// writes them) replaced by plain text, to judge the rest of it.
pub(super) fn without_references(value: &str) -> String {
    let plain = each_expression(value, |inner, whole| {
        Ok::<_, std::convert::Infallible>(match is_reference(inner) {
            true => "x".to_string(),
            false => whole.to_string(),
        })
    });
    plain.unwrap_or_else(|never| match never {})
}

/// Whether a value is a router option's, whose `${name}` is the regex's group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Router {
    Replacement,
    Other,
}

fn reference(inner: &str, whole: &str, source: Source, router: Router) -> Result<String, AtDeploy> {
    let at_deploy = || AtDeploy {
        expression: whole.to_string(),
    };
    let name = |n: &str| {
        !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
    };
    if is_reference(inner) {
        // Kafka's providers, read as the relay reads them.
        return Ok(whole.to_string());
    }
    match (source, inner.split_once(':')) {
        // The router's group: `${routedByValue}`.
        (_, None) if router == Router::Replacement => Ok(whole.to_string()),
        // SmallRye Config: a property, from the environment as Server runs.
        (Source::DebeziumServer, None) if name(inner) => {
            Ok(format!("${{env:{}}}", env_name(inner)))
        }
        (Source::DebeziumServer, Some((n, default))) if name(n) => {
            Ok(format!("${{env:{}:-{default}}}", env_name(n)))
        }
        // A placeholder a script fills in before posting the body.
        (Source::Connect | Source::ConnectJson, None) if name(inner) => {
            Ok(format!("${{env:{inner}}}"))
        }
        _ => Err(at_deploy()),
    }
}

/// The environment variable SmallRye Config reads a property from: every
/// character but letters and digits an underscore, upper case.
fn env_name(property: &str) -> String {
    property
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c.to_ascii_uppercase(),
            false => '_',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_become_references_the_relay_resolves() {
        let r = |v: &str, s: Source| references(v, s, Router::Other);
        assert_eq!(r("${env:DB}", Source::ConnectJson).unwrap(), "${env:DB}");
        assert_eq!(
            r("${file:/s/db.properties:host}", Source::Connect).unwrap(),
            "${file:/s/db.properties:host}"
        );
        assert_eq!(
            r("${DB_NAME}", Source::ConnectJson).unwrap(),
            "${env:DB_NAME}"
        );
        assert_eq!(
            r("db-${DB_NAME}", Source::Connect).unwrap(),
            "db-${env:DB_NAME}"
        );
        assert_eq!(
            r("${db.name:orders}", Source::DebeziumServer).unwrap(),
            "${env:DB_NAME:-orders}"
        );
        assert_eq!(
            r("${PG_PASSWORD}", Source::DebeziumServer).unwrap(),
            "${env:PG_PASSWORD}"
        );
        assert_eq!(
            references(
                "outbox.${routedByValue}",
                Source::DebeziumServer,
                Router::Replacement
            )
            .unwrap(),
            "outbox.${routedByValue}"
        );
        assert_eq!(r("plain", Source::Strimzi).unwrap(), "plain");
        assert_eq!(
            without_references("${env:T}.${routedByValue}"),
            "x.${routedByValue}"
        );
        for (v, s) in [
            ("${secrets:ns/pg:password}", Source::Strimzi),
            ("${DB_NAME}", Source::Strimzi),
            ("${vault:secret/pg:password}", Source::ConnectJson),
        ] {
            assert_eq!(r(v, s).unwrap_err().expression, v, "{v}");
        }
    }
}
