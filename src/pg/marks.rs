//! Row bookkeeping over an ordinary SQL connection: FAILED rows (which gate
//! settlement) and PUBLISHED rows (in batches). Both updates are guarded by
//! the row's current status, so a row another actor changed is never
//! overwritten.

use tokio_postgres::Client;

use super::sqlstate::query_error;
use crate::config::Config;
use crate::contract::outbox::{self, Status};
use crate::contract::value::Uuid;
use crate::error::{Code, Error};

/// Which rows an update may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Guard {
    /// Streamed rows: only while still PENDING as inserted.
    Pending,
    /// Rows a cutover handed over: any status but PUBLISHED or FAILED
    /// (AMBIGUOUS, EXHAUSTED, IN_FLIGHT with an expired lease), taking the
    /// polling-era lease off.
    HandedOver,
}

pub(crate) struct Marker {
    failed: [String; 2],
    published: [String; 2],
}

fn index(guard: Guard) -> usize {
    match guard {
        Guard::Pending => 0,
        Guard::HandedOver => 1,
    }
}

impl Marker {
    pub(crate) fn new(cfg: &Config) -> Marker {
        let table = cfg.qualified_table();
        let id = outbox::MESSAGE_ID.name;
        let status = outbox::STATUS.name;
        let lease = outbox::LEASE_EXPIRES_AT.name;
        let pending = format!("{status} = '{}'", Status::Pending.as_str());
        let handed_over = format!(
            "{status} NOT IN ('{}', '{}') AND ({lease} IS NULL OR {lease} <= now())",
            Status::Published.as_str(),
            Status::Failed.as_str()
        );
        let release = format!(
            "{lease} = NULL, {owner} = NULL, {next} = NULL",
            owner = outbox::LEASE_OWNER.name,
            next = outbox::NEXT_ATTEMPT_AT.name
        );
        let failed = |guard: &str, extra: &str| {
            format!(
                "UPDATE {table} SET {status} = '{failed}', {code} = $2{extra} WHERE {id} = ANY($1::text[]::uuid[]) AND {guard}",
                failed = Status::Failed.as_str(),
                code = outbox::LAST_FAILURE_CODE.name,
            )
        };
        let published = |guard: &str, extra: &str| {
            format!(
                "UPDATE {table} SET {status} = '{published}', {at} = now(){extra} WHERE {id} = ANY($1::text[]::uuid[]) AND {guard}",
                published = Status::Published.as_str(),
                at = outbox::PUBLISHED_AT.name,
            )
        };
        let release = format!(", {release}");
        Marker {
            failed: [failed(&pending, ""), failed(&handed_over, &release)],
            published: [published(&pending, ""), published(&handed_over, &release)],
        }
    }

    /// Records rows as FAILED with `code`; returns how many rows changed.
    pub(crate) async fn failed(
        &self,
        client: &Client,
        ids: &[Uuid],
        code: &str,
        guard: Guard,
    ) -> Result<u64, Error> {
        let ids: Vec<String> = ids.iter().map(Uuid::to_string).collect();
        client
            .execute(&self.failed[index(guard)], &[&ids, &code])
            .await
            .map_err(query_error(Code::ROW_MARKING_FAILED))
    }

    /// Marks rows PUBLISHED; returns how many rows changed.
    pub(crate) async fn published(
        &self,
        client: &Client,
        ids: &[Uuid],
        guard: Guard,
    ) -> Result<u64, Error> {
        let ids: Vec<String> = ids.iter().map(Uuid::to_string).collect();
        client
            .execute(&self.published[index(guard)], &[&ids])
            .await
            .map_err(query_error(Code::ROW_MARKING_FAILED))
    }
}
