use super::*;

fn expanded(text: &str) -> Result<String, Unexpanded> {
    expand(text, JsonNull::Ignore).map(|e| String::from_utf8(e.json().to_vec()).unwrap())
}

#[test]
fn doubles_are_written_as_java_writes_them() {
    for (d, java) in [
        (1.1, "1.1"),
        (100.0, "100.0"),
        (1e7, "1.0E7"),
        (9_999_999.5, "9999999.5"),
        (0.001, "0.001"),
        (0.000_1, "1.0E-4"),
        (1e-7, "1.0E-7"),
        (-2.5e300, "-2.5E300"),
        (123_456.789, "123456.789"),
        (-0.0, "-0.0"),
        (0.1 + 0.2, "0.30000000000000004"),
    ] {
        assert_eq!(java_double(d), java, "{d}");
    }
}

#[test]
fn objects_expand_with_their_schema_and_what_java_leaves_out() {
    assert_eq!(
        expanded(
            r#"{"a": 1, "b": "x", "n": null, "e": [], "big": 3000000000, "d": 1.50, "o": {"z": true, "y": {}}}"#
        ),
        Ok(r#"{"a":1,"b":"x","big":3000000000,"d":1.5,"o":{"z":true,"y":{}}}"#.into())
    );
    assert_eq!(
        expand(r#"{"n": null, "a": [null, 1]}"#, JsonNull::OptionalBytes)
            .map(|e| String::from_utf8(e.json().to_vec()).unwrap()),
        Ok(r#"{"n":null,"a":[null,1]}"#.into())
    );
    // Objects in an array with one shape; missing members are null.
    assert_eq!(
        expanded(r#"{"l": [{"k": 1}, {"k": 2}]}"#),
        Ok(r#"{"l":[{"k":1},{"k":2}]}"#.into())
    );
    // Text after the first value is ignored, as Jackson's readTree does.
    assert_eq!(expanded(r#"{"a": 1} trailing"#), Ok(r#"{"a":1}"#.into()));
    assert_eq!(
        expanded(r#"{"s": "\ud83d\ude00 \u00e9 \n"}"#),
        Ok(r#"{"s":"\uD83D\uDE00 é \n"}"#.into())
    );
}

#[test]
fn struct_to_string_is_javas() {
    let java = |text: &str| expand(text, JsonNull::Ignore).map(|e| e.java());
    // Written by Kafka Connect's StringConverter for the same payloads.
    assert_eq!(
        java(r#"{"id": 1, "lines": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 3}]}"#),
        Ok("Struct{id=1,lines=[Struct{sku=a,qty=2}, Struct{sku=b,qty=3}]}".into())
    );
    assert_eq!(
        java(r#"{"a": [null, 1], "d": 1.10, "e": 1e-7, "n": null, "o": {}}"#),
        Ok("Struct{a=[null, 1],d=1.1,e=1.0E-7,o=Struct{}}".into())
    );
}

#[test]
fn what_java_cannot_expand_stays_text() {
    for text in [r#"[1, 2]"#, r#"{"a": 123456789012345678901234567890}"#] {
        assert_eq!(expanded(text), Err(Unexpanded::FailsDebezium), "{text}");
    }
    assert_eq!(expanded("[]"), Err(Unexpanded::NoSchema));
    for text in [
        r#" {"lead": 1}"#,
        r#""text""#,
        r#"{"a": [1, 2.5]}"#,
        r#"{"a": [1, "x"]}"#,
        r#"{"a": [1, 3000000000]}"#,
        r#"{"a": [null, null]}"#,
        r#"{"a": [[]]}"#,
        r#"{"a": 01}"#,
        r#"{"a": "#,
        "{\"a\": \"raw\ttab\"}",
    ] {
        assert_eq!(expanded(text), Err(Unexpanded::KeptAsText), "{text}");
    }
    assert_eq!(
        expanded(r#"{"l": [{"k": 1}, {"j": 2}]}"#),
        Err(Unexpanded::NotReproduced)
    );
    assert_eq!(
        expanded(r#"{"s": "\ud83d"}"#),
        Err(Unexpanded::NotReproduced)
    );
}
