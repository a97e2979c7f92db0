//! What a contract's columns are for: the plan resolves each by its role,
//! and the catalog check names it.

/// What a contract column is for; the catalog check and the plan name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    EventId,
    Key,
    Payload,
    RouteBy,
    Timestamp,
    SchemaVersion,
    Header,
    Envelope,
    Partition,
    /// The platform's application headers.
    ApplicationHeaders,
    /// Another column of the platform's table (status, leases, ...).
    Table,
}

impl Role {
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::EventId => "event id",
            Role::Key => "key",
            Role::Payload => "payload",
            Role::RouteBy => "routing field",
            Role::Timestamp => "event timestamp",
            Role::SchemaVersion => "schema version",
            Role::Header => "header",
            Role::Envelope => "envelope field",
            Role::Partition => "partition",
            Role::ApplicationHeaders => "application headers",
            Role::Table => "the platform's table",
        }
    }
}

/// A column an option names: what it is for and, for an additional
/// placement, the name it goes under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Named<'a> {
    pub column: &'a str,
    pub role: Role,
    /// A header's or envelope field's name.
    pub alias: &'a str,
}

impl<'a> Named<'a> {
    pub(crate) const fn of(column: &'a str, role: Role) -> Named<'a> {
        Named {
            column,
            role,
            alias: column,
        }
    }
}
