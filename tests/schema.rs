//! `schema/ruleset.schema.json` and `schema/suite.schema.json` must equal
//! the schemas generated from the rule-file and suite-file types.
//! Regenerate with `KADMIT_BLESS=1 cargo test schema`.

use std::path::Path;

use serde_json::Value;

#[test]
fn schema_file_matches_the_rule_types() {
    compare_with_file("schema/ruleset.schema.json", &kadmit::rules::json_schema());
}

#[test]
fn schema_file_matches_the_suite_types() {
    compare_with_file("schema/suite.schema.json", &kadmit::suite::json_schema());
}

#[test]
fn suite_schema_describes_the_suite_format() {
    let schema = kadmit::suite::json_schema();
    assert_eq!(schema["title"], "Suite");
    let text = schema.to_string();
    for field in [
        "objectFile",
        "oldObjectFile",
        "reviewFile",
        "subResource",
        "ruleSet",
        "denies",
        "warns",
        "patchedFile",
        "CONNECT",
    ] {
        assert!(text.contains(field), "schema lacks {field}");
    }
}

fn compare_with_file(file: &str, schema: &Value) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let generated = serde_json::to_string_pretty(schema).unwrap() + "\n";
    if std::env::var_os("KADMIT_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "{} is out of date: run `KADMIT_BLESS=1 cargo test schema`",
        path.display()
    );
}

#[test]
fn schema_describes_the_rule_language() {
    let schema = kadmit::rules::json_schema();
    let text = schema.to_string();
    for field in [
        "setIfAbsent",
        "mergeIfAbsent",
        "injectIfMissing",
        "forEach",
        "greaterOrEqual",
        "subsetOf",
        "objectSelector",
    ] {
        assert!(text.contains(field), "schema lacks {field}");
    }
    assert_eq!(schema["title"], "RuleSet");
}
