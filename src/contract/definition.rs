//! A contract as a value: which table, which of its columns make the
//! record and how (the Outbox Event Router's options), whether the table
//! keeps status, which Kafka Connect converters write the bytes, and what
//! the platform's table asks of its rows beyond that. The router's plan,
//! the generator and the catalog check read one [`Contract`]; the two
//! built-ins are made here.

use std::collections::BTreeMap;

use super::context::ContextHeaders;
use super::options::{Additional, Placement, RouterOptions};
use super::outbox;
pub use super::role::Role;
use crate::error::Error;

/// The built-in contracts, as `[outbox] contract` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContractName {
    /// The platform's `messaging_outbox`, its 15 headers and its status.
    Messaging,
    /// The table in Debezium's outbox documentation, with the router's
    /// defaults; `[outbox.router]` changes any option.
    Debezium,
}

impl ContractName {
    pub const ALL: [ContractName; 2] = [ContractName::Messaging, ContractName::Debezium];

    pub const fn as_str(self) -> &'static str {
        match self {
            ContractName::Messaging => "messaging",
            ContractName::Debezium => "debezium",
        }
    }

    pub fn parse(name: &str) -> Option<ContractName> {
        ContractName::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

/// Whether the relay records each row's outcome in the row itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// `PUBLISHED` and `FAILED` marks, the fence, cutover, audit, replay.
    Kept,
    /// Rows are inserted and deleted in one transaction: progress is the
    /// slot's position alone, a row that cannot be published goes to the
    /// dead-letter table.
    NotKept,
}

pub use super::converters::Converters;

/// The row schema's name for the documented table under the generator's
/// default logical name.
pub const DEFAULT_RECORD_NAME: &str = "outbox-cdc.public.outboxevent.Value";

/// One column a contract needs, with what it is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub column: String,
    pub role: Role,
}

/// Whether a row whose routing value is empty is routed (to a topic that is
/// the replacement's text alone) or refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmptyRoute {
    /// As Debezium does.
    Routed,
    /// The platform's: a destination names a topic of its own.
    Refused,
}

/// What a contract asks of each row beyond the router's options: the
/// platform's CHECK constraints, kept again on the stream for a table whose
/// constraints were never validated (`router::checks`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowRules {
    /// A `jsonb` column of application headers: a flat object of strings,
    /// none in the platform's namespace; never published.
    pub application_headers: Option<String>,
    pub empty_route: EmptyRoute,
}

impl RowRules {
    /// Nothing beyond the router's options: Debezium's own behaviour.
    pub fn none() -> RowRules {
        RowRules {
            application_headers: None,
            empty_route: EmptyRoute::Routed,
        }
    }
}

/// A contract: everything that decides the records of one outbox table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contract {
    pub name: ContractName,
    pub router: RouterOptions,
    pub status: Status,
    pub converters: Converters,
    pub rules: RowRules,
    /// Debezium's `__debezium.context.*` headers, before `id`; `None` when
    /// its release or `extended.headers.enabled` writes none.
    pub context: Option<ContextHeaders>,
    /// The name of Debezium's schema of the table's rows
    /// (`<topic.prefix>.<schema>.<table>.Value`), after which the router
    /// names an envelope's schema.
    pub record_name: String,
}

impl Contract {
    /// The platform's contract: the router's options the generated Debezium
    /// configuration has always held, from the table's single definition.
    pub fn messaging(topic_prefix: &str) -> Contract {
        let additional = outbox::CANONICAL_HEADERS
            .iter()
            .map(|h| Additional {
                column: h.column.name.to_string(),
                placement: Placement::Header,
                alias: h.name.to_string(),
            })
            .collect();
        Contract {
            name: ContractName::Messaging,
            router: RouterOptions {
                event_id: outbox::MESSAGE_ID.name.into(),
                event_key: Some(outbox::ROUTING_KEY.name.into()),
                payload: outbox::PAYLOAD.name.into(),
                route_by: outbox::DESTINATION.name.into(),
                topic_replacement: format!("{topic_prefix}${{routedByValue}}"),
                additional,
                ..RouterOptions::default()
            },
            status: Status::Kept,
            converters: Converters::platform(),
            rules: RowRules {
                application_headers: Some(outbox::HEADERS.name.into()),
                empty_route: EmptyRoute::Refused,
            },
            context: None,
            record_name: String::new(),
        }
    }

    /// Debezium's documented table and the router's defaults, with the
    /// options `[outbox.router]` sets.
    pub fn debezium(
        options: &BTreeMap<String, String>,
        converters: Converters,
    ) -> Result<Contract, Error> {
        let router = RouterOptions::from_options(options)?;
        Ok(Contract {
            name: ContractName::Debezium,
            router,
            status: Status::NotKept,
            converters,
            rules: RowRules::none(),
            context: None,
            record_name: DEFAULT_RECORD_NAME.into(),
        })
    }

    /// With the context headers Debezium writes.
    pub fn with_context(mut self, context: Option<ContextHeaders>) -> Contract {
        self.context = context;
        self
    }

    /// With Debezium's name of the table's row schema.
    pub fn with_record_name(mut self, name: String) -> Contract {
        self.record_name = name;
        self
    }

    /// The columns the contract reads, each with its first role: those
    /// its router options name, then its row rules'.
    pub fn requirements(&self) -> Vec<Requirement> {
        let rules = self
            .rules
            .application_headers
            .iter()
            .map(|c| (c.as_str(), Role::ApplicationHeaders));
        let mut out: Vec<Requirement> = Vec::new();
        for (column, role) in self
            .router
            .named_columns()
            .into_iter()
            .map(|n| (n.column, n.role))
            .chain(rules)
        {
            if !out.iter().any(|q| q.column == column) {
                out.push(Requirement {
                    column: column.to_string(),
                    role,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_messaging_contract_is_the_routers_options_the_platform_always_generated() {
        let c = Contract::messaging("outbox.");
        let p = c.router.properties();
        let get = |k: &str| p.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("table.field.event.id"), Some("message_id"));
        assert_eq!(get("table.field.event.key"), Some("routing_key"));
        assert_eq!(get("table.field.event.payload"), Some("payload"));
        assert_eq!(get("route.by.field"), Some("destination"));
        assert_eq!(
            get("route.topic.replacement"),
            Some("outbox.${routedByValue}")
        );
        assert_eq!(get("route.topic.regex"), None);
        assert!(get("table.fields.additional.placement")
            .unwrap()
            .starts_with("message_type:header:msg.type,message_version:header:msg.version,"));
        assert_eq!(c.status, Status::Kept);
        assert_eq!(c.converters, Converters::platform());
        // Destination is both routing field and header; headers are checked.
        assert_eq!(c.requirements().len(), 4 + 15 - 1 + 1);
    }

    #[test]
    fn the_debezium_contract_reads_the_documented_table() {
        let c = Contract::debezium(&BTreeMap::new(), Converters::json()).unwrap();
        let columns: Vec<(String, Role)> = c
            .requirements()
            .into_iter()
            .map(|r| (r.column, r.role))
            .collect();
        assert_eq!(
            columns,
            vec![
                ("id".into(), Role::EventId),
                ("aggregateid".into(), Role::Key),
                ("payload".into(), Role::Payload),
                ("aggregatetype".into(), Role::RouteBy),
            ]
        );
        assert_eq!(c.status, Status::NotKept);
        assert_eq!(
            c.router.topic_rule().unwrap().topic("Order"),
            "outbox.event.Order"
        );
    }
}
