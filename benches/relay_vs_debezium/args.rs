//! The bench's command line.

use std::path::PathBuf;

use crate::engine::Engine;
use crate::rows::{Contract, RowTrace};
use anyhow::{anyhow, bail, Result};

#[derive(Debug, Clone)]
pub(crate) struct Args {
    pub(crate) rows: i64,
    pub(crate) payload: i32,
    pub(crate) tx_sizes: Vec<i64>,
    /// The steady streams' offered rates (msg/s).
    pub(crate) rates: Vec<u32>,
    pub(crate) seconds: u32,
    pub(crate) partitions: i32,
    pub(crate) out: PathBuf,
    /// Scenario groups to run (baselines, backlog, steady) and engines; for
    /// profiling one part. The committed results come from a full run.
    pub(crate) only: Vec<String>,
    pub(crate) engines: Vec<Engine>,
    /// Drains per backlog scenario; the table shows the median.
    pub(crate) repeat: usize,
    /// The one-transaction scenario (`--only bigtx`): its rows and payload.
    pub(crate) big_rows: i64,
    pub(crate) big_payload: i32,
    /// The instructions scenario (`--only instructions`): its smaller backlog.
    pub(crate) instr_rows: i64,
    /// Destinations the backlog's rows are spread over (curve (a) sets it).
    pub(crate) destinations: i64,
    /// Drains per point of the cost curves (`--only curves`).
    pub(crate) curve_repeat: usize,
    /// The long backlog of curve (c).
    pub(crate) long_rows: i64,
    /// The profile (`--only profile`): its backlog of 100-row transactions.
    pub(crate) profile_rows: i64,
    /// Rows per transaction of the profile's backlog.
    pub(crate) profile_tx: i64,
    /// What the rows' `traceparent` column holds.
    pub(crate) row_trace: RowTrace,
    /// The outbox table and contract the scenarios write to and the
    /// engines read (`--contract debezium`: Debezium's documented table,
    /// which keeps no status; backlogs and steady streams only).
    pub(crate) contract: Contract,
}

impl Args {
    /// These arguments with the sizes a results file's `settings` record,
    /// so its ratios can be computed again as its run computed them.
    pub(crate) fn with_settings(&self, settings: &serde_json::Value) -> Args {
        let ints = |key: &str| -> Option<Vec<i64>> {
            settings[key]
                .as_array()
                .map(|v| v.iter().filter_map(serde_json::Value::as_i64).collect())
        };
        let mut a = self.clone();
        if let Some(rows) = settings["rows"].as_i64() {
            a.rows = rows;
        }
        if let Some(tx) = ints("tx_sizes") {
            a.tx_sizes = tx;
        }
        if let Some(rates) = ints("rates_msg_s") {
            a.rates = rates
                .into_iter()
                .filter_map(|r| u32::try_from(r).ok())
                .collect();
        }
        a
    }

    pub(crate) fn parse() -> Result<Args> {
        let mut a = Args {
            rows: 200_000,
            payload: 500,
            tx_sizes: vec![1, 100],
            rates: vec![100, 2_000],
            seconds: 20,
            partitions: 6,
            out: PathBuf::from("docs"),
            only: [
                "baselines",
                "backlog",
                "steady",
                "instructions",
                "bigtx",
                "profile",
                "curves",
                "replication",
            ]
            .map(String::from)
            .to_vec(),
            engines: vec![
                Engine::Relay,
                Engine::RelayFixedLinger,
                Engine::RelayLinger0,
                Engine::RelayUnmarked,
                Engine::Debezium,
            ],
            repeat: 5,
            big_rows: 1_000_000,
            big_payload: 1024,
            instr_rows: 20_000,
            destinations: 1,
            curve_repeat: 3,
            long_rows: 10_000_000,
            profile_rows: 1_000_000,
            profile_tx: 100,
            row_trace: RowTrace::Sampled,
            contract: Contract::Messaging,
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            let mut value = || it.next().ok_or_else(|| anyhow!("{flag} needs a value"));
            match flag.as_str() {
                "--rows" => a.rows = value()?.parse()?,
                "--payload" => a.payload = value()?.parse()?,
                "--tx-sizes" => {
                    a.tx_sizes = value()?
                        .split(',')
                        .map(str::parse)
                        .collect::<Result<_, _>>()?
                }
                "--rate" => a.rates = vec![value()?.parse()?],
                "--rates" => {
                    a.rates = value()?
                        .split(',')
                        .map(str::parse)
                        .collect::<Result<_, _>>()?
                }
                "--seconds" => a.seconds = value()?.parse()?,
                "--partitions" => a.partitions = value()?.parse()?,
                "--out" => a.out = value()?.into(),
                "--repeat" => a.repeat = value()?.parse()?,
                "--big-rows" => a.big_rows = value()?.parse()?,
                "--big-payload" => a.big_payload = value()?.parse()?,
                "--instr-rows" => a.instr_rows = value()?.parse()?,
                "--profile-rows" => a.profile_rows = value()?.parse()?,
                "--curve-repeat" => a.curve_repeat = value()?.parse()?,
                "--long-rows" => a.long_rows = value()?.parse()?,
                "--profile-tx" => a.profile_tx = value()?.parse()?,
                "--traceparent" => {
                    a.row_trace = match value()?.as_str() {
                        "sampled" => RowTrace::Sampled,
                        "none" => RowTrace::Absent,
                        other => bail!("--traceparent is sampled or none, not {other}"),
                    }
                }
                "--contract" => a.contract = Contract::parse(&value()?)?,
                "--only" => a.only = value()?.split(',').map(str::to_string).collect(),
                "--engines" => {
                    a.engines = value()?
                        .split(',')
                        .map(|e| match e {
                            "outbox-cdc" => Ok(Engine::Relay),
                            "outbox-cdc-unmarked" => Ok(Engine::RelayUnmarked),
                            "outbox-cdc-fixed-linger" => Ok(Engine::RelayFixedLinger),
                            "outbox-cdc-linger0" => Ok(Engine::RelayLinger0),
                            "outbox-cdc-baseline" => Ok(Engine::RelayBaseline),
                            "debezium" => Ok(Engine::Debezium),
                            "outbox-cdc-transactional" => Ok(Engine::RelayTransactional),
                            "outbox-cdc-metrics" => Ok(Engine::RelayMetrics),
                            "outbox-cdc-otel" => Ok(Engine::RelayOtel),
                            "outbox-cdc-otel-default" => Ok(Engine::RelayOtelDefault),
                            "debezium-exactly-once" => Ok(Engine::DebeziumExactlyOnce),
                            other => Err(anyhow!("unknown engine {other}")),
                        })
                        .collect::<Result<_>>()?
                }
                // cargo bench passes --bench to harness=false programs.
                "--bench" | "--render-only" => {}
                other => bail!("unknown argument {other}"),
            }
        }
        if a.repeat == 0
            || a.rows < 2
            || a.payload < 0
            || a.rates.is_empty()
            || a.rates.contains(&0)
            || a.seconds == 0
            || a.tx_sizes.is_empty()
        {
            bail!("rows >= 2, payload >= 0, rates > 0, seconds > 0 and at least one tx size");
        }
        a.check_contract()?;
        Ok(a)
    }

    /// What runs on a table that keeps no status: the backlogs and steady
    /// streams of the engines that do not mark rows.
    fn check_contract(&self) -> Result<()> {
        if self.contract == Contract::Messaging {
            return Ok(());
        }
        if let Some(group) = self
            .only
            .iter()
            .find(|g| !["backlog", "steady"].contains(&g.as_str()))
        {
            bail!(
                "--contract {} runs backlog and steady only, not {group}: pass --only",
                self.contract.name()
            );
        }
        if self.engines.contains(&Engine::RelayUnmarked) {
            bail!("a table that keeps no status has no PUBLISHED marks to turn off: outbox-cdc-unmarked");
        }
        Ok(())
    }
}
