use serde_json::json;

use super::*;

#[test]
fn reads_the_position_as_debeziums_loader_does() {
    // As Debezium stored it after a change inside a transaction.
    let inside = json!({"lsn_proc": 2000, "lsn_commit": 1500, "lsn": 2000, "txId": 771,
                        "ts_usec": 1_700_000_000_000_000i64, "messageType": "INSERT"});
    let o = Offset::from_json(&inside).unwrap();
    assert_eq!(o.committed, Lsn(1500));
    assert_eq!(o.processed, Some(Lsn(2000)));
    assert!(o.inside_a_transaction());
    // A change that starts where the previous transaction ended: its
    // transaction was published in part all the same (found with real
    // Debezium, two writers committing back to back).
    let adjacent = json!({"lsn_proc": 1476392120, "messageType": "INSERT", "lsn_commit": 1476392120,
                          "lsn": 1476392120, "txId": 99146, "ts_usec": 1796514886504577i64});
    assert!(Offset::from_json(&adjacent).unwrap().inside_a_transaction());
    let committed =
        json!({"lsn_proc": 1500, "messageType": "COMMIT", "lsn_commit": 1500, "lsn": 1500});
    assert!(!Offset::from_json(&committed)
        .unwrap()
        .inside_a_transaction());
    // Without lsn_commit, Debezium's loader takes lsn_proc, then lsn.
    let o = Offset::from_json(&json!({"lsn_proc": 900, "lsn": 950})).unwrap();
    assert_eq!((o.committed, o.inside_a_transaction()), (Lsn(900), false));
    assert_eq!(
        Offset::from_json(&json!({"lsn": 950})).unwrap().committed,
        Lsn(950)
    );
}

#[test]
fn an_offset_without_a_position_is_refused() {
    for bad in [
        json!({"ts_usec": 1}),
        json!({"lsn_commit": "0/16B3748"}),
        json!({"lsn": -1}),
    ] {
        let e = Offset::from_json(&bad).unwrap_err();
        assert_eq!(e.code(), Code::OFFSET_INVALID, "{bad}");
    }
}

#[test]
fn after_a_commit_every_position_is_the_commit_s_end() {
    let v = Offset::after_commit(Lsn(0x16B_3748), 42);
    assert_eq!(
        v.to_string(),
        r#"{"lsn_proc":23803720,"messageType":"COMMIT","lsn_commit":23803720,"lsn":23803720,"ts_usec":42}"#
    );
    let back = Offset::from_json(&v).unwrap();
    assert_eq!(
        (back.committed, back.inside_a_transaction()),
        (Lsn(0x16B_3748), false)
    );
    assert_eq!(partition("shop").to_string(), r#"{"server":"shop"}"#);
}
