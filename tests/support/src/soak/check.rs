//! The checker: shares no code with the relay; reads PostgreSQL and Kafka
//! once the soak is over, stops both relays and says what it found.

use super::*;

pub(super) async fn check(services: &Services, opts: &Options, finished: Finished<'_>) -> Report {
    let Finished {
        bootstrap,
        db,
        slot,
        topic,
        tap,
        mut members,
        faults,
        committed_seen,
        start,
    } = finished;
    let client = services.connect(&db.name).await;
    let table = workload::outbox_ids(&client).await;
    assert!(table.len() >= committed_seen);
    let missing = tap.wait_for(&table, Duration::from_secs(240));
    let records = tap.records();
    drop(tap);
    let distinct: HashSet<&str> = records.iter().map(|r| r.id.as_str()).collect();
    let out_of_order = workload::out_of_order(&records).len();
    let mut throughput = Vec::new();
    for r in &records {
        let bucket = (r.at.saturating_duration_since(start).as_secs() / 10) as usize;
        if throughput.len() <= bucket {
            throughput.resize(bucket + 1, 0);
        }
        throughput[bucket] += 1;
    }
    // No exit but the nemesis's kills, then a clean stop of both.
    let mut unexpected_exits = 0;
    for m in &mut members {
        if let Some(p) = m.process.as_mut() {
            if p.child.try_wait().ok().flatten().is_some() {
                unexpected_exits += 1;
                eprintln!(
                    "a relay exited by itself:\n{}",
                    relay::warnings_in(&[p.log_text()])
                );
            }
        }
    }
    for m in &mut members {
        if let Some(p) = m.process.as_mut() {
            p.signal("TERM");
            if !p.wait(Duration::from_secs(60)).is_some_and(|s| s.success()) {
                unexpected_exits += 1;
            }
        }
    }
    let statuses = crate::text_pairs(
        &client,
        "WITH j AS (SELECT DISTINCT unnest(message_ids) AS id FROM public.outbox_cdc_published)
         SELECT o.message_id::text,
                CASE WHEN o.status = 'PENDING' AND j.id IS NOT NULL THEN 'JOURNALED' ELSE o.status END
           FROM public.messaging_outbox o LEFT JOIN j ON j.id = o.message_id",
    )
    .await;
    let pending_after_stop = statuses.iter().filter(|(_, s)| s == "PENDING").count();
    let published_not_in_kafka = statuses
        .iter()
        .filter(|(id, s)| (s == "PUBLISHED" || s == "JOURNALED") && !distinct.contains(id.as_str()))
        .count();
    let committed_duplicates = match opts.delivery {
        Delivery::Transactional => {
            let seen = kafka::consume_all(
                bootstrap,
                &[topic],
                Duration::from_secs(10),
                kafka::READ_COMMITTED,
            );
            Some(seen.len() - kafka::by_id(&seen).len())
        }
        Delivery::Idempotent => None,
    };
    let report = Report {
        seed: opts.seed,
        delivery: opts.delivery,
        kafka: opts.kafka,
        planned_minutes: opts.duration.as_secs_f64() / 60.0,
        minutes: start.elapsed().as_secs_f64() / 60.0,
        faults,
        committed: table.len(),
        records: records.len(),
        lost: missing.len(),
        duplicates: records.len() - distinct.len(),
        committed_duplicates,
        out_of_order_keys: out_of_order,
        pending_after_stop,
        published_not_in_kafka,
        unexpected_exits,
        throughput,
    };
    report::write(&report, &opts.report_dir);
    crate::replication::drop_slot(&client, slot).await;
    drop(client);
    report
}
