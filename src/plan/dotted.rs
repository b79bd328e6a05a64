//! Member names written after a dot that RFC 9535 reads differently from
//! what was meant, and the bracket form that says it.
//!
//! RFC 9535 allows only letters, digits and `_` in `.name`, so
//! `$.object.metadata.labels.app-name` does not parse, and
//! `$.object.metadata.labels.app.kubernetes.io/name` does not either; worse,
//! `$.object.metadata.annotations.example.com` parses, as three steps, and
//! never selects anything, because an annotation's value is a string. This
//! module reads a path as written (the parser keeps no positions) to name
//! the member and to write it as `['app-name']`.

/// One step of a path as written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece<'a> {
    /// `.name`, with whatever characters up to the next `.` or `[`.
    Dot(&'a str),
    /// Anything else (`[...]`, `..`, `..name`), kept as written.
    Raw(&'a str),
}

/// Maps whose values are strings in every Kubernetes object: a step after
/// their key can select nothing.
const STRING_MAPS: &[&str] = &["labels", "annotations", "matchLabels", "nodeSelector"];

/// Splits the text after the root (`$`, `$$`, `$name`) into pieces, or
/// `None` when it is not made of dot and bracket steps.
fn pieces(text: &str) -> Option<(&str, Vec<Piece<'_>>)> {
    let bytes = text.as_bytes();
    if bytes.first() != Some(&b'$') {
        return None;
    }
    let mut i = 1;
    if bytes.get(1) == Some(&b'$') {
        i = 2;
    } else {
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
    }
    let root = &text[..i];
    let mut pieces = Vec::new();
    while i < bytes.len() {
        let start = i;
        match bytes[i] {
            b'.' if bytes.get(i + 1) == Some(&b'.') => {
                i += 2;
                while i < bytes.len() && !matches!(bytes[i], b'.' | b'[') {
                    i += 1;
                }
                pieces.push(Piece::Raw(&text[start..i]));
            }
            b'.' => {
                i += 1;
                while i < bytes.len() && !matches!(bytes[i], b'.' | b'[') {
                    i += 1;
                }
                pieces.push(Piece::Dot(&text[start + 1..i]));
            }
            b'[' => {
                let mut quote = None;
                // A filter holds brackets of its own: `[?@.a == $.b[0]]`.
                let mut nested = 0_usize;
                i += 1;
                loop {
                    let &b = bytes.get(i)?;
                    i += 1;
                    match (quote, b) {
                        (Some(_), b'\\') => i += 1,
                        (Some(q), _) if b == q => quote = None,
                        (None, b'\'' | b'"') => quote = Some(b),
                        (None, b'[') => nested += 1,
                        (None, b']') if nested > 0 => nested -= 1,
                        (None, b']') => break,
                        _ => {}
                    }
                }
                pieces.push(Piece::Raw(text.get(start..i)?));
            }
            _ => return None,
        }
    }
    Some((root, pieces))
}

/// True for a member name RFC 9535 accepts after a dot (or `*`).
fn is_shorthand(name: &str) -> bool {
    let first_ok = |c: char| c.is_ascii_alphabetic() || c == '_' || !c.is_ascii();
    name == "*"
        || (name.chars().next().is_some_and(first_ok)
            && name.chars().all(|c| first_ok(c) || c.is_ascii_digit()))
}

/// `key` as a bracketed name, escaped as RFC 9535 string literals are:
/// the quote, the backslash and control characters.
fn bracket(key: &str) -> String {
    let mut out = String::from("['");
    for c in key.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push_str("']");
    out
}

/// The end of the run of dot steps starting at `start`.
fn dot_run_end(pieces: &[Piece<'_>], start: usize) -> usize {
    pieces[start..]
        .iter()
        .position(|piece| matches!(piece, Piece::Raw(_)))
        .map_or(pieces.len(), |offset| start + offset)
}

fn push(out: &mut String, piece: &Piece<'_>) {
    match piece {
        Piece::Dot(name) => {
            out.push('.');
            out.push_str(name);
        }
        Piece::Raw(raw) => out.push_str(raw),
    }
}

fn join(root: &str, pieces: &[Piece<'_>]) -> String {
    let mut out = root.to_owned();
    pieces.iter().for_each(|piece| push(&mut out, piece));
    out
}

/// The names of dot steps, joined by dots: a key as it was written.
fn dot_names(pieces: &[Piece<'_>]) -> String {
    let names: Vec<&str> = pieces
        .iter()
        .filter_map(|piece| match piece {
            Piece::Dot(name) => Some(*name),
            Piece::Raw(_) => None,
        })
        .collect();
    names.join(".")
}

/// The path with every member name that cannot follow a dot written in
/// brackets; a key of `labels`, `annotations`, `matchLabels` or
/// `nodeSelector` takes every dot step after it, as label keys have dots.
/// `None` when nothing needs it; otherwise the first such key, and the path.
/// One pass over the steps, so its time is linear in the path's length.
pub fn bracket_form(text: &str) -> Option<(String, String)> {
    let (root, pieces) = pieces(text)?;
    let mut out = root.to_owned();
    let mut first_key = None;
    let mut start = 0;
    while start < pieces.len() {
        let end = dot_run_end(&pieces, start);
        if start == end {
            // A bracket or descendant step, kept as written.
            push(&mut out, &pieces[start]);
            start += 1;
            continue;
        }
        // Within one run of dot steps.
        let mut cursor = start;
        while cursor < end {
            let Some(bad) = (cursor..end)
                .find(|&i| matches!(pieces[i], Piece::Dot(name) if !is_shorthand(name)))
            else {
                pieces[cursor..end]
                    .iter()
                    .for_each(|piece| push(&mut out, piece));
                break;
            };
            let map = (cursor..bad)
                .rev()
                .find(|&i| matches!(pieces[i], Piece::Dot(name) if STRING_MAPS.contains(&name)));
            let (key_start, key_end) = match map {
                Some(map) => (map + 1, end),
                None => (bad, bad + 1),
            };
            pieces[cursor..key_start]
                .iter()
                .for_each(|piece| push(&mut out, piece));
            let key = dot_names(&pieces[key_start..key_end]);
            out.push_str(&bracket(&key));
            first_key.get_or_insert(key);
            cursor = key_end;
        }
        start = end;
    }
    first_key.map(|key| (key, out))
}

/// For a path that parses: the bracket form when it steps past the value of
/// a label or annotation (`metadata.labels.app.kubernetes.io`), which is a
/// string, so the path could never select anything.
pub fn past_string_value(text: &str) -> Option<String> {
    let (root, pieces) = pieces(text)?;
    let start = pieces.iter().enumerate().position(|(i, piece)| {
        let after_metadata = i > 0
            && pieces[i - 1] == Piece::Dot("metadata")
            && matches!(piece, Piece::Dot("labels" | "annotations"));
        after_metadata || *piece == Piece::Dot("matchLabels")
    })? + 1;
    let end = dot_run_end(&pieces, start);
    if end - start < 2 || pieces[start..end].contains(&Piece::Dot("*")) {
        return None;
    }
    let mut out = join(root, &pieces[..start]);
    out.push_str(&bracket(&dot_names(&pieces[start..end])));
    out.push_str(&join("", &pieces[end..]));
    Some(out)
}

/// For a path that parses: the first member name written after a dot with
/// blank space inside it (`$.object.a b`), and the path with that name in
/// brackets. RFC 9535 allows blank space only between steps (`$.a .b`);
/// jsonpath-rust reads `a b` as one name, so the rule would read a key
/// nobody meant, where the RFC refuses the path.
pub fn blank_in_name(text: &str) -> Option<(String, String)> {
    let (root, pieces) = pieces(text)?;
    let bad = pieces.iter().position(|piece| {
        matches!(piece, Piece::Dot(name)
            if name.starts_with(char::is_whitespace)
                || name.trim_end().contains(char::is_whitespace))
    })?;
    let Piece::Dot(name) = pieces[bad] else {
        return None;
    };
    let name = name.trim();
    let mut out = join(root, &pieces[..bad]);
    out.push_str(&bracket(name));
    out.push_str(&join("", &pieces[bad + 1..]));
    Some((name.to_owned(), out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_blank_space_inside_a_dotted_name_and_not_between_steps() {
        for (written, name, fixed) in [
            ("$.object.a b", "a b", "$.object['a b']"),
            ("$.object.a\tb.c", "a\tb", r"$.object['a\tb'].c"),
            ("$.object.ü  b[0]", "ü  b", "$.object['ü  b'][0]"),
        ] {
            assert_eq!(
                blank_in_name(written),
                Some((name.to_owned(), fixed.to_owned())),
                "{written:?}"
            );
        }
        for fine in [
            "$.object.a .b",
            "$.object.a\n[0]",
            "$.object['a b'].c",
            "$.a.b",
        ] {
            assert_eq!(blank_in_name(fine), None, "{fine:?}");
        }
    }

    #[test]
    fn brackets_names_a_dot_cannot_take() {
        for (written, fixed) in [
            (
                "$.object.metadata.labels.app-name",
                "$.object.metadata.labels['app-name']",
            ),
            (
                "$.object.metadata.labels.app.kubernetes.io/name",
                "$.object.metadata.labels['app.kubernetes.io/name']",
            ),
            (
                "$.object.spec.template.metadata.annotations.example.com/x-y",
                "$.object.spec.template.metadata.annotations['example.com/x-y']",
            ),
            (
                "$.object.spec.my-field.sub",
                "$.object.spec['my-field'].sub",
            ),
            ("$.object.spec.a-b.c-d", "$.object.spec['a-b']['c-d']"),
            (
                "$.object.spec.containers[*].my-field",
                "$.object.spec.containers[*]['my-field']",
            ),
            ("$$.podSpec.x-y", "$$.podSpec['x-y']"),
            ("$pod.x-y", "$pod['x-y']"),
            ("$.object.spec['a.b'].c-d", "$.object.spec['a.b']['c-d']"),
            ("$.object.spec.2x", "$.object.spec['2x']"),
            ("$.object.labels.it's", "$.object.labels['it\\'s']"),
            // A filter's own brackets are part of its step.
            (
                "$.object.spec.containers[?@.name == $.spec.containers[0].name].x-y",
                "$.object.spec.containers[?@.name == $.spec.containers[0].name]['x-y']",
            ),
        ] {
            let suggestion = bracket_form(written).map(|(_, fixed)| fixed);
            assert_eq!(suggestion.as_deref(), Some(fixed), "{written}");
        }
        for fine in [
            "$.object.spec.containers[*].image",
            "$.object..image",
            "$.*",
        ] {
            assert_eq!(bracket_form(fine), None, "{fine}");
        }
        // Linear in the length: a long path of bad names is answered whole.
        let long = format!("$.object{}", ".a-b".repeat(100_000));
        let (key, fixed) = bracket_form(&long).unwrap();
        assert_eq!(key, "a-b");
        assert_eq!(fixed.matches("['a-b']").count(), 100_000);
        // A filter with brackets inside is one step, not a name "name]".
        assert_eq!(
            bracket_form("$.object.spec.containers[?@.name == $.spec.containers[*].name]"),
            None
        );
        // Not dot and bracket steps: no suggestion rather than a wrong one.
        assert_eq!(bracket_form("$.a[?@.b == 'x'"), None);
        assert_eq!(bracket_form("object.a-b"), None);
    }

    #[test]
    fn sees_steps_past_a_label_value() {
        assert_eq!(
            past_string_value("$.object.metadata.annotations.example.com").as_deref(),
            Some("$.object.metadata.annotations['example.com']")
        );
        assert_eq!(
            past_string_value("$.oldObject.spec.selector.matchLabels.app.kubernetes.io").as_deref(),
            Some("$.oldObject.spec.selector.matchLabels['app.kubernetes.io']")
        );
        for fine in [
            "$.object.metadata.labels.app",
            "$.object.metadata.labels['app.kubernetes.io/name']",
            "$.object.metadata.labels.*",
            "$.object.spec.labels.a.b",
            "$.object.metadata.name",
        ] {
            assert_eq!(past_string_value(fine), None, "{fine}");
        }
    }
}
