//! `schema/ruleset.schema.json` must equal the schema generated from the
//! rule-file types. Regenerate with `KADMIT_BLESS=1 cargo test schema`.

use std::path::Path;

#[test]
fn schema_file_matches_the_rule_types() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/ruleset.schema.json");
    let generated = serde_json::to_string_pretty(&kadmit::rules::json_schema()).unwrap() + "\n";
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
