//! The documentation cannot rot: every relative link and `#anchor` in
//! `README.md`, `CONTRIBUTING.md` and `docs/*.md` resolves, and every command
//! block marked as runnable exits as documented when run against the built
//! binary.
//!
//! A runnable block is a ```` ```sh ```` block on the line right after
//! `<!-- runnable: exit=N -->`. Each of its commands (a line, or lines joined
//! by a trailing `\`; blank lines and `#` comments are skipped) runs with
//! `sh -c` in the repository root and must exit with `N`. `kadmit` on the
//! `PATH` is the binary under test, and a leading `cargo run --` or
//! `cargo run --release --` is replaced by `kadmit`, so the README's commands
//! run as written without building anything else.
#![cfg(unix)]

use std::collections::{BTreeSet, HashMap};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one documented command may run; they are all offline and take
/// well under a second on a debug build.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `README.md`, `CONTRIBUTING.md` and every `docs/*.md`, sorted.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ is readable")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A line of a Markdown file, with whether it is inside a fenced code block
/// (the fence lines themselves count as inside).
fn lines_with_fences(text: &str) -> Vec<(usize, &str, bool)> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"]
            .into_iter()
            .find(|marker| trimmed.starts_with(marker));
        match (fence, marker) {
            (None, Some(marker)) => {
                fence = Some(marker);
                out.push((i + 1, line, true));
            }
            (Some(open), Some(marker)) if open == marker && trimmed.trim_end() == marker => {
                fence = None;
                out.push((i + 1, line, true));
            }
            _ => out.push((i + 1, line, fence.is_some())),
        }
    }
    out
}

/// GitHub's anchor for a heading: lowercase, spaces become `-`, and every
/// character but letters, digits, `-` and `_` is dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every anchor a Markdown text defines; a repeated heading gets `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for (_, line, fenced) in lines_with_fences(text) {
        if fenced {
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim().trim_end_matches('#'));
        let count = seen.entry(base.clone()).or_insert(0);
        out.insert(if *count == 0 {
            base.clone()
        } else {
            format!("{base}-{count}")
        });
        *count += 1;
    }
    out
}

/// The inline link targets of a Markdown text, with their line numbers,
/// outside code blocks and code spans.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (number, line, fenced) in lines_with_fences(text) {
        if fenced {
            continue;
        }
        // Dropping the code spans leaves `[`...`](target)` as `[](target)`.
        let prose: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, part)| part)
            .collect();
        let mut rest = prose.as_str();
        while let Some(start) = rest.find("](") {
            let after = &rest[start + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end]
                .split_whitespace()
                .next()
                .unwrap_or("")
                .trim_start_matches('<')
                .trim_end_matches('>');
            out.push((number, target.to_owned()));
            rest = &after[end + 1..];
        }
    }
    out
}

/// Every link of `files` that does not resolve, as `file:line: target: why`.
/// Returns the problems and the number of relative links checked.
fn check_links(files: &[PathBuf], root: &Path) -> (Vec<String>, usize) {
    let root = root.canonicalize().expect("the root exists");
    let mut anchor_cache: HashMap<PathBuf, BTreeSet<String>> = HashMap::new();
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in files {
        let text = read(file);
        let file = file.canonicalize().expect("the document exists");
        let shown = file.strip_prefix(&root).unwrap_or(&file).display();
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let mut problem = |why: &str| problems.push(format!("{shown}:{line}: {target}: {why}"));
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                file.parent().expect("a file has a parent").join(path)
            };
            let Ok(resolved) = resolved.canonicalize() else {
                problem("no such file or directory");
                continue;
            };
            if !resolved.starts_with(&root) {
                problem("outside the repository");
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if resolved.extension().is_none_or(|ext| ext != "md") {
                problem("an anchor on a file that is not Markdown");
                continue;
            }
            let defined = anchor_cache
                .entry(resolved.clone())
                .or_insert_with(|| anchors(&read(&resolved)));
            if !defined.contains(anchor) {
                problem("no heading has this anchor");
            }
        }
    }
    (problems, checked)
}

/// One command block marked as runnable.
#[derive(Debug)]
struct Block {
    /// Where the block starts, `file:line`.
    at: String,
    /// The exit code every command must have.
    exit: i32,
    /// The commands, `cargo run` already replaced by `kadmit`.
    commands: Vec<String>,
}

/// The runnable blocks of a Markdown text, or every malformed marker.
fn runnable_blocks(name: &str, text: &str) -> Result<Vec<Block>, Vec<String>> {
    let lines = lines_with_fences(text);
    let mut blocks = Vec::new();
    let mut errors = Vec::new();
    for (index, &(number, line, fenced)) in lines.iter().enumerate() {
        let line = line.trim();
        if fenced || !line.starts_with("<!-- runnable") {
            continue;
        }
        let exit = line
            .strip_prefix("<!-- runnable: exit=")
            .and_then(|rest| rest.strip_suffix(" -->"))
            .and_then(|code| code.parse::<i32>().ok());
        let Some(exit) = exit else {
            errors.push(format!(
                "{name}:{number}: write the marker as `<!-- runnable: exit=N -->`"
            ));
            continue;
        };
        if lines
            .get(index + 1)
            .is_none_or(|(_, next, _)| next.trim() != "```sh")
        {
            errors.push(format!(
                "{name}:{number}: a runnable marker must be followed by a ```sh block"
            ));
            continue;
        }
        let mut commands = Vec::new();
        let mut pending = String::new();
        for &(_, body, _) in lines[index + 2..]
            .iter()
            .take_while(|(_, body, _)| body.trim() != "```")
        {
            let body = body.trim();
            if pending.is_empty() && (body.is_empty() || body.starts_with('#')) {
                continue;
            }
            match body.strip_suffix('\\') {
                Some(start) => {
                    pending.push_str(start.trim_end());
                    pending.push(' ');
                }
                None => {
                    pending.push_str(body);
                    commands.push(as_kadmit(&std::mem::take(&mut pending)));
                }
            }
        }
        if commands.is_empty() {
            errors.push(format!("{name}:{number}: the runnable block is empty"));
            continue;
        }
        blocks.push(Block {
            at: format!("{name}:{}", number + 1),
            exit,
            commands,
        });
    }
    if errors.is_empty() {
        Ok(blocks)
    } else {
        Err(errors)
    }
}

/// `cargo run [--release] -- ARGS` becomes `kadmit ARGS`.
fn as_kadmit(command: &str) -> String {
    for prefix in ["cargo run --release -- ", "cargo run -- "] {
        if let Some(args) = command.strip_prefix(prefix) {
            return format!("kadmit {args}");
        }
    }
    command.to_owned()
}

/// A directory holding `kadmit`, a link to the binary under test, to put
/// first on `PATH`.
fn kadmit_on_path() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kadmit"), dir.path().join("kadmit"))
        .expect("a symlink to the binary");
    dir
}

/// Runs every command of `block` in `cwd`; returns one message per command
/// that did not exit with the documented code in time.
fn run_block(block: &Block, cwd: &Path, bin: &Path, timeout: Duration) -> Vec<String> {
    let path = match std::env::var_os("PATH") {
        Some(path) => {
            let mut dirs = vec![bin.to_path_buf()];
            dirs.extend(std::env::split_paths(&path));
            std::env::join_paths(dirs).expect("a PATH")
        }
        None => bin.as_os_str().to_owned(),
    };
    let mut failures = Vec::new();
    for command in &block.commands {
        // Files, not pipes: a command that writes more than a pipe holds
        // would block while nobody reads it.
        let mut stdout = tempfile::tempfile().expect("a temporary file");
        let mut stderr = tempfile::tempfile().expect("a temporary file");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(cwd)
            .env("PATH", &path)
            .stdin(Stdio::null())
            .stdout(Stdio::from(stdout.try_clone().expect("a file handle")))
            .stderr(Stdio::from(stderr.try_clone().expect("a file handle")))
            .spawn()
            .expect("sh runs");
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = child.try_wait().expect("the child can be waited on") {
                break Some(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let outcome = match status.map(|status| status.code()) {
            Some(Some(code)) if code == block.exit => continue,
            Some(Some(code)) => format!("exited {code}"),
            Some(None) => "was killed by a signal".to_owned(),
            None => format!("did not finish within {} s", timeout.as_secs_f32()),
        };
        let mut out = String::new();
        let mut err = String::new();
        let _ = std::io::Seek::rewind(&mut stdout).map(|()| stdout.read_to_string(&mut out));
        let _ = std::io::Seek::rewind(&mut stderr).map(|()| stderr.read_to_string(&mut err));
        failures.push(format!(
            "{}: `{command}` {outcome}, documented exit={}\n--- stdout\n{}\n--- stderr\n{}",
            block.at,
            block.exit,
            tail(&out),
            tail(&err)
        ));
    }
    failures
}

/// The last 2,000 characters of `text`.
fn tail(text: &str) -> &str {
    let mut start = text.len().saturating_sub(2_000);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let files = documents();
    for expected in [
        "docs/rules.md",
        "docs/server.md",
        "docs/observability.md",
        "docs/install.md",
        "docs/testing-rules.md",
        "docs/benchmarks.md",
        "docs/reload.md",
    ] {
        assert!(
            files.contains(&root().join(expected)),
            "{expected} is not among {files:?}"
        );
    }
    let (problems, checked) = check_links(&files, &root());
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
    // The README alone links every docs/ file; far fewer means the scanner
    // stopped seeing links.
    assert!(checked >= 40, "only {checked} relative links found");
}

#[test]
fn a_broken_link_or_anchor_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "b.md", "# B\n\n## Section `two`\n");
    let a = write(
        dir.path(),
        "a.md",
        "# A\n\n## Same\n\n## Same\n\n\
         [fine](b.md#section-two) [fine](#same-1) [fine](b.md) [web](https://example.com/x#y)\n\
         [missing file](missing.md)\n\
         [missing anchor](b.md#section-three)\n\
         [missing local anchor](#same-2)\n\
         Code is not a link: `[x](ignored.md)`\n\n\
         ```md\n[x](also-ignored.md)\n```\n",
    );
    let (problems, checked) = check_links(&[a], dir.path());
    assert_eq!(checked, 6, "{problems:?}");
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(
        problems[0].starts_with("a.md:8: missing.md: no such file"),
        "{problems:#?}"
    );
    assert!(
        problems[1].contains("b.md#section-three: no heading"),
        "{problems:#?}"
    );
    assert!(problems[2].contains("#same-2: no heading"), "{problems:#?}");
}

#[test]
fn a_link_out_of_the_repository_is_reported() {
    let outer = tempfile::tempdir().unwrap();
    let repo = outer.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    write(outer.path(), "elsewhere.md", "# Elsewhere\n");
    let a = write(&repo, "a.md", "[up](../elsewhere.md)\n");
    let (problems, _) = check_links(&[a], &repo);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].ends_with("outside the repository"),
        "{problems:#?}"
    );
}

#[test]
fn heading_slugs_follow_github() {
    for (heading, expected) in [
        (
            "Where the `/mutate` time went",
            "where-the-mutate-time-went",
        ),
        (
            "The empty-string `memcmp` trap (fixed)",
            "the-empty-string-memcmp-trap-fixed",
        ),
        (
            "1. From a file change to the new plan serving",
            "1-from-a-file-change-to-the-new-plan-serving",
        ),
        ("Install, update, uninstall", "install-update-uninstall"),
        ("kadmit check", "kadmit-check"),
        ("Hot reload: what is tested", "hot-reload-what-is-tested"),
    ] {
        assert_eq!(slug(heading), expected, "{heading}");
    }
    let defined = anchors("# Tests\n\n```sh\n# not a heading\n```\n\n## Tests\n#no-space\n");
    assert_eq!(
        defined,
        BTreeSet::from(["tests".to_owned(), "tests-1".to_owned()])
    );
}

#[test]
fn every_runnable_block_exits_as_documented() {
    let root = root();
    let mut blocks = Vec::new();
    let mut errors = Vec::new();
    for file in documents() {
        let name = file.strip_prefix(&root).unwrap().display().to_string();
        match runnable_blocks(&name, &read(&file)) {
            Ok(found) => blocks.extend(found),
            Err(found) => errors.extend(found),
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    let commands: Vec<&str> = blocks
        .iter()
        .flat_map(|block| block.commands.iter().map(String::as_str))
        .collect();
    for documented in [
        "kadmit check rules",
        "kadmit test rules tests/fixtures/admission-reviews/create-pod.json",
        "kadmit webhook-config ",
        "kadmit schema",
    ] {
        assert!(
            commands
                .iter()
                .any(|command| command.starts_with(documented)),
            "no runnable block runs `{documented}`: {commands:#?}"
        );
    }
    let bin = kadmit_on_path();
    let failures: Vec<String> = blocks
        .iter()
        .flat_map(|block| run_block(block, &root, bin.path(), COMMAND_TIMEOUT))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn a_command_with_another_exit_code_fails_its_block() {
    let text = "<!-- runnable: exit=0 -->\n```sh\ncargo run -- check no-such-directory\n```\n\n\
                <!-- runnable: exit=2 -->\n```sh\n# a comment\n\ncargo run --release -- \\\n  check no-such-directory\n```\n";
    let blocks = runnable_blocks("t.md", text).unwrap();
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].at, "t.md:2");
    assert_eq!(blocks[0].commands, ["kadmit check no-such-directory"]);
    assert_eq!(blocks[1].commands, ["kadmit check no-such-directory"]);
    let bin = kadmit_on_path();
    let wrong = run_block(&blocks[0], &root(), bin.path(), COMMAND_TIMEOUT);
    assert_eq!(wrong.len(), 1, "{wrong:#?}");
    assert!(
        wrong[0].contains("exited 2, documented exit=0"),
        "{wrong:#?}"
    );
    assert!(wrong[0].contains("no-such-directory"), "{wrong:#?}");
    let right = run_block(&blocks[1], &root(), bin.path(), COMMAND_TIMEOUT);
    assert!(right.is_empty(), "{right:#?}");
}

#[test]
fn a_command_that_does_not_finish_is_stopped() {
    let blocks =
        runnable_blocks("t.md", "<!-- runnable: exit=0 -->\n```sh\nsleep 30\n```\n").unwrap();
    let bin = kadmit_on_path();
    let started = Instant::now();
    let failures = run_block(&blocks[0], &root(), bin.path(), Duration::from_millis(300));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert!(failures[0].contains("did not finish"), "{failures:#?}");
}

#[test]
fn a_malformed_marker_is_an_error() {
    let text = "<!-- runnable -->\n```sh\nkadmit schema\n```\n\n\
                <!-- runnable: exit=0 -->\n```text\nkadmit schema\n```\n\n\
                <!-- runnable: exit=0 -->\n```sh\n# only a comment\n```\n";
    let errors = runnable_blocks("t.md", text).unwrap_err();
    assert_eq!(errors.len(), 3, "{errors:#?}");
    assert!(
        errors[0].starts_with("t.md:1: write the marker"),
        "{errors:#?}"
    );
    assert!(
        errors[1].starts_with("t.md:6: a runnable marker must be followed"),
        "{errors:#?}"
    );
    assert!(
        errors[2].starts_with("t.md:11: the runnable block is empty"),
        "{errors:#?}"
    );
}
