//! One partition's pass: its records in offset order against its rows,
//! read alongside in creation order, with what is held in between.

use std::collections::{HashMap, VecDeque};

use super::report::{Finding, Report};
use super::{show_key, Live, Scan, LOOKUP, LOOKUP_BYTES, PAGE, SLACK_US};
use crate::contract::outbox;
use crate::error::Error;
use crate::kafka::placement;
use crate::kafka::window::Found;
use crate::pg::connect;
use crate::pg::window::{self as rows, Entries, Entry, WindowRow};
use crate::row::value::{parse_uuid, Uuid};

/// The rows of one partition, read a page at a time.
pub(super) struct Rows<'s, 'a> {
    scan: &'s Scan<'a>,
    partitions: i32,
    partition: i32,
    /// Opened at the first read.
    entries: Option<Entries>,
    page: VecDeque<WindowRow>,
    done: bool,
}

impl<'s, 'a> Rows<'s, 'a> {
    pub(super) fn new(scan: &'s Scan<'a>, partitions: i32, partition: i32) -> Self {
        Rows {
            scan,
            partitions,
            partition,
            entries: None,
            page: VecDeque::new(),
            done: false,
        }
    }

    /// The next row of this partition created at or before `until_us`.
    pub(super) async fn next_until(&mut self, until_us: i64) -> Result<Option<WindowRow>, Error> {
        loop {
            if let Some(front) = self.page.front() {
                if front.created_us > until_us {
                    return Ok(None);
                }
                return Ok(self.page.pop_front());
            }
            if self.done {
                return Ok(None);
            }
            let entries = match &mut self.entries {
                Some(entries) => entries,
                None => {
                    let client = connect::connect(self.scan.postgres, self.scan.env).await?;
                    let of = rows::Slice {
                        table: self.scan.table,
                        destination: Some(self.scan.destination),
                        bounds: self.scan.bounds,
                    };
                    self.entries.insert(Entries::open(client, &of).await?)
                }
            };
            // Ids and keys first: only this partition's rows are read whole.
            let entries = entries.page(PAGE).await?;
            self.done = entries.len() < PAGE;
            let mine: Vec<String> = entries
                .into_iter()
                .filter(|e| self.mine(e))
                .map(|e| e.id)
                .collect();
            let page = rows::rows(self.scan.sql, self.scan.table, &mine).await?;
            self.page.extend(page);
        }
    }

    fn mine(&self, e: &Entry) -> bool {
        match &e.routing_key {
            Some(key) => placement::partition(key.as_bytes(), self.partitions) == self.partition,
            // The mapper refuses it: it belongs to partition 0's scan, once.
            None => self.partition == 0,
        }
    }
}

/// A key's latest first delivery: its record's timestamp, its row's
/// creation time and id.
#[derive(Debug, Clone, Copy)]
struct Latest {
    stamped: i64,
    created_us: i64,
    id: Uuid,
}

/// What one partition's scan holds.
#[derive(Default)]
pub(super) struct State {
    live: HashMap<Uuid, Live>,
    /// Live ids in creation order, to drop them.
    by_time: VecDeque<(i64, Uuid)>,
    /// Rows the scan went `margin` past without their record.
    waiting: HashMap<Uuid, Live>,
    /// Each key's latest first delivery.
    keys: HashMap<Vec<u8>, Latest>,
    /// Records whose id is no row of the scan: looked up by id.
    unknown: Vec<(Uuid, Found)>,
    /// Bytes the unknown records hold.
    unknown_bytes: usize,
    watermark_us: i64,
    pub(super) rows: u64,
    pub(super) records: u64,
}

/// One partition's pass.
pub(super) struct Pass<'s, 'a, 'r> {
    pub(super) scan: &'s Scan<'a>,
    pub(super) rows: Rows<'s, 'a>,
    pub(super) state: State,
    pub(super) partition: i32,
    pub(super) report: &'r mut Report,
}

impl<'s, 'a, 'r> Pass<'s, 'a, 'r> {
    pub(super) fn new(scan: &'s Scan<'a>, partition: i32, report: &'r mut Report) -> Self {
        Pass {
            scan,
            rows: Rows::new(scan, scan.partitions, partition),
            state: State::default(),
            partition,
            report,
        }
    }

    /// One record: its row's first delivery, a duplicate, or unknown.
    pub(super) async fn one(&mut self, found: Found) -> Result<(), Error> {
        self.state.records += 1;
        let ts_us = found.timestamp_ms.unwrap_or_default().saturating_mul(1000);
        self.state.watermark_us = self.state.watermark_us.max(ts_us);
        // Rows created by now may have their record by now.
        while let Some(r) = self
            .rows
            .next_until(self.state.watermark_us + SLACK_US)
            .await?
        {
            self.state.rows += 1;
            if let Some((id, live)) = self.scan.live(r) {
                self.state.by_time.push_back((live.created_us, id));
                self.state.live.insert(id, live);
            }
        }
        let id = found
            .header(outbox::ID_HEADER.name)
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|t| parse_uuid(t).ok());
        let Some(id) = id else {
            if ts_us >= self.scan.request.since_us {
                self.report.note(Finding::Orphan {
                    id: found
                        .header(outbox::ID_HEADER.name)
                        .map(|v| String::from_utf8_lossy(v).into_owned()),
                    topic: self.scan.topic.to_string(),
                    partition: self.partition,
                    offset: found.offset,
                });
            }
            return Ok(());
        };
        if let Some(mut live) = self.state.waiting.remove(&id) {
            // Its first delivery came more than `margin` after the row.
            self.first_delivery(&mut live, id, &found);
            self.state.by_time.push_back((live.created_us, id));
            self.state.live.insert(id, live);
            return Ok(());
        }
        match self.state.live.get_mut(&id) {
            Some(live) if live.first.is_some() => {
                self.report.note(Finding::Duplicate {
                    id: id.to_string(),
                    topic: self.scan.topic.to_string(),
                    partition: self.partition,
                    first_offset: live.first,
                    offset: found.offset,
                    status: live.status.clone(),
                });
            }
            Some(_) => {
                if let Some(mut live) = self.state.live.remove(&id) {
                    self.first_delivery(&mut live, id, &found);
                    self.state.live.insert(id, live);
                }
            }
            None => {
                self.state.unknown_bytes += found.value.as_ref().map_or(0, Vec::len);
                self.state.unknown.push((id, found));
                if self.state.unknown.len() >= LOOKUP || self.state.unknown_bytes >= LOOKUP_BYTES {
                    self.resolve().await?;
                }
            }
        }
        self.drop_old();
        Ok(())
    }

    fn first_delivery(&mut self, live: &mut Live, id: Uuid, found: &Found) {
        live.first = Some(found.offset);
        self.report.delivered += 1;
        if let Some(expected) = &live.expected {
            let fields = expected.differences(found);
            if !fields.is_empty() {
                self.report.note(Finding::Differs {
                    id: id.to_string(),
                    topic: self.scan.topic.to_string(),
                    partition: self.partition,
                    offset: found.offset,
                    fields,
                    status: live.status.clone(),
                });
            }
        }
        // Out of order: stamped before the key's latest first delivery
        // (the relay stamps its transaction's commit time) and created
        // before it too. Both, so that two commits racing within a
        // millisecond, or Debezium's processing time, accuse no one.
        let stamped = found.timestamp_ms.unwrap_or_default();
        let key = found.key.clone().unwrap_or_default();
        match self.state.keys.get(&key) {
            Some(latest) if stamped < latest.stamped && live.created_us < latest.created_us => {
                self.report.note(Finding::OutOfOrder {
                    id: id.to_string(),
                    key: show_key(&key),
                    topic: self.scan.topic.to_string(),
                    partition: self.partition,
                    offset: found.offset,
                    after: latest.id.to_string(),
                    status: live.status.clone(),
                });
            }
            Some(latest) if stamped < latest.stamped => {}
            _ => {
                self.state.keys.insert(
                    key,
                    Latest {
                        stamped,
                        created_us: live.created_us,
                        id,
                    },
                );
            }
        }
    }

    /// Rows the scan is `margin` past: dropped once delivered, kept aside
    /// when not; keys whose last delivery is that old are forgotten.
    fn drop_old(&mut self) {
        let before = self
            .state
            .watermark_us
            .saturating_sub(self.scan.request.margin.as_micros() as i64);
        while let Some((created, id)) = self.state.by_time.front().copied() {
            if created >= before {
                break;
            }
            self.state.by_time.pop_front();
            if let Some(live) = self.state.live.remove(&id) {
                if live.first.is_none() {
                    self.state.waiting.insert(id, live);
                }
            }
        }
        if self.state.keys.len() > 2 * PAGE && self.state.keys.len() > 4 * self.state.live.len() {
            self.state
                .keys
                .retain(|_, latest| latest.created_us >= before);
        }
    }

    /// Looks the unknown records' ids up: a row of the window is a
    /// duplicate (or in the wrong partition), no row at all an orphan.
    async fn resolve(&mut self) -> Result<(), Error> {
        let unknown = std::mem::take(&mut self.state.unknown);
        self.state.unknown_bytes = 0;
        let ids: Vec<String> = unknown.iter().map(|(id, _)| id.to_string()).collect();
        let known = rows::lookup(self.scan.sql, self.scan.table, &ids).await?;
        for ((id, found), text) in unknown.into_iter().zip(ids) {
            let offset = found.offset;
            // Its row was read after it (a clock behind the commit's): a
            // first delivery, or a duplicate, as any other.
            let row = match self.state.live.remove(&id) {
                Some(live) => Some(live),
                None => self.state.waiting.remove(&id),
            };
            if let Some(mut live) = row {
                match live.first {
                    None => self.first_delivery(&mut live, id, &found),
                    Some(first) => {
                        self.report.note(Finding::Duplicate {
                            id: text,
                            topic: self.scan.topic.to_string(),
                            partition: self.partition,
                            first_offset: Some(first),
                            offset,
                            status: live.status.clone(),
                        });
                    }
                }
                self.state.live.insert(id, live);
                continue;
            }
            let ts_ms = found.timestamp_ms;
            match known.get(&text) {
                None => {
                    let ts_us = ts_ms.unwrap_or_default().saturating_mul(1000);
                    if ts_us >= self.scan.request.since_us {
                        self.report.note(Finding::Orphan {
                            id: Some(text),
                            topic: self.scan.topic.to_string(),
                            partition: self.partition,
                            offset,
                        });
                    }
                }
                Some(k) => {
                    let in_window = k.destination == self.scan.destination
                        && k.created_us.is_some_and(|c| {
                            (self.scan.request.since_us..self.scan.request.until_us).contains(&c)
                        });
                    if !in_window {
                        continue;
                    }
                    let expected =
                        placement::partition(k.routing_key.as_bytes(), self.scan.partitions);
                    if expected != self.partition {
                        self.report.note(Finding::Differs {
                            id: text,
                            topic: self.scan.topic.to_string(),
                            partition: self.partition,
                            offset,
                            fields: vec![format!("partition (expected {expected})")],
                            status: k.status.clone(),
                        });
                    } else {
                        self.report.note(Finding::Duplicate {
                            id: text,
                            topic: self.scan.topic.to_string(),
                            partition: self.partition,
                            first_offset: None,
                            offset,
                            status: k.status.clone(),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// The partition's end: the rows left are loaded, unknown records
    /// looked up, and every row without its record is reported.
    pub(super) async fn finish(&mut self) -> Result<(), Error> {
        while let Some(r) = self.rows.next_until(i64::MAX).await? {
            self.state.rows += 1;
            if let Some((id, live)) = self.scan.live(r) {
                self.state.live.insert(id, live);
            }
        }
        self.resolve().await?;
        let missing = self
            .state
            .live
            .drain()
            .chain(self.state.waiting.drain())
            .filter(|(_, live)| live.first.is_none());
        for (id, live) in missing {
            self.scan.missing(id, &live, self.partition, self.report);
        }
        Ok(())
    }
}
