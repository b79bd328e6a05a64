//! Any text, indexed by `kadmit::json::Doc` and parsed by serde_json: both
//! accept it or both refuse it (but for the index's own refusals, nesting
//! past `MAX_DEPTH`), and every reading through the index is what the same
//! reading of serde_json's `Value` gives; and `kadmit::json::Cursor`
//! builds the same `Value`, and skips only texts serde_json skips.
#![no_main]

use kadmit::json::{Cursor, Doc, JsonRef, Refusal};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Reads `text` and `value` the same way, as deep as they go.
fn same(text: JsonRef<'_>, value: &Value, depth: usize) {
    assert_eq!(text.to_value(), *value);
    assert!(text == JsonRef::Value(value));
    assert_eq!(text.len(), JsonRef::Value(value).len());
    if depth > 8 {
        return;
    }
    match value {
        Value::Object(map) => {
            let members = text.members();
            assert_eq!(members.len(), map.len());
            for ((key, member), (expected_key, expected)) in members.iter().zip(map) {
                assert_eq!(key, expected_key);
                let got = text.get(key).expect("member by key");
                assert!(got == *member);
                same(got, expected, depth + 1);
            }
        }
        Value::Array(list) => {
            for (i, expected) in list.iter().enumerate() {
                same(text.at(i).expect("element"), expected, depth + 1);
            }
            assert!(text.at(list.len()).is_none());
        }
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = serde_json::from_str::<Value>(source);
    match Doc::parse(source, 1 << 20) {
        Ok(doc) => {
            let value = parsed.as_ref().expect("indexed, so serde_json reads it too");
            same(JsonRef::root(&doc), value, 0);
        }
        Err(Refusal::Invalid) => assert!(parsed.is_err(), "refused a text serde_json reads"),
        Err(Refusal::TooDeep | Refusal::TooManyValues) => {}
    }
    // The cursor builds what serde_json builds, with serde_json's nesting
    // limit (127 containers) given as its own...
    let mut cursor = Cursor::new(source);
    let built = cursor.value(127).ok().filter(|_| {
        cursor.skip_whitespace();
        cursor.at() == source.len()
    });
    match (built, &parsed) {
        (Some(value), Ok(expected)) => assert_eq!(value, *expected),
        (None, Err(_)) => {}
        (built, parsed) => panic!("cursor {built:?}, serde_json {parsed:?}"),
    }
    // ...and skips only what serde_json skips (as it reads a `RawValue`).
    let mut cursor = Cursor::new(source);
    if cursor.skip_value().is_ok() {
        cursor.skip_whitespace();
        if cursor.at() == source.len() {
            assert!(serde_json::from_str::<Box<serde_json::value::RawValue>>(source).is_ok());
        }
    }
});
