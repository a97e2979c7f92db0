//! Row bookkeeping over an ordinary SQL connection: FAILED rows (which gate
//! settlement) and PUBLISHED rows (best effort, in batches). Both updates are
//! guarded by the row's current status, so a row another actor changed is
//! never overwritten.

use tokio_postgres::Client;

use crate::config::Config;
use crate::outbox::{self, Status};
use crate::value::Uuid;

pub struct Marker {
    failed_sql: String,
    published_sql: String,
}

impl Marker {
    pub fn new(cfg: &Config) -> Marker {
        let table = format!("{}.{}", cfg.outbox.schema, cfg.outbox.table);
        let (id, status) = (outbox::MESSAGE_ID.name, outbox::STATUS.name);
        Marker {
            failed_sql: format!(
                "UPDATE {table} SET {status} = '{failed}', {code} = $2 \
                 WHERE {id} = ANY($1::text[]::uuid[]) AND {status} = '{pending}'",
                failed = Status::Failed.as_str(),
                code = outbox::LAST_FAILURE_CODE.name,
                pending = Status::Pending.as_str(),
            ),
            published_sql: format!(
                "UPDATE {table} SET {status} = '{published}', {at} = now() \
                 WHERE {id} = ANY($1::text[]::uuid[]) AND {status} = '{pending}'",
                published = Status::Published.as_str(),
                at = outbox::PUBLISHED_AT.name,
                pending = Status::Pending.as_str(),
            ),
        }
    }

    /// Records rows as FAILED with `code`; returns how many rows changed.
    pub async fn failed(
        &self,
        client: &Client,
        ids: &[Uuid],
        code: &str,
    ) -> Result<u64, tokio_postgres::Error> {
        let ids: Vec<String> = ids.iter().map(Uuid::to_string).collect();
        client.execute(&self.failed_sql, &[&ids, &code]).await
    }

    /// Marks rows PUBLISHED; returns how many rows changed.
    pub async fn published(
        &self,
        client: &Client,
        ids: &[Uuid],
    ) -> Result<u64, tokio_postgres::Error> {
        let ids: Vec<String> = ids.iter().map(Uuid::to_string).collect();
        client.execute(&self.published_sql, &[&ids]).await
    }
}
