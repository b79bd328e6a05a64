//! `kadmit policies DIR`: print the rules as the API server's in-tree
//! admission policies (a ValidatingAdmissionPolicy and its binding for a
//! rule's deny entries, a MutatingAdmissionPolicy and its binding for its
//! mutations), or write them as files with `--output-dir` (one file per
//! rule, for the API server's `staticManifestsDir`).
//!
//! Rules with no in-tree form are listed on stderr with the reason. By
//! default they make the command fail; with `--partial` the others are
//! written and those rules stay in the webhook.
//!
//! Exit codes: 0 with the policies written, 1 when the rules have problems
//! or (without `--partial`) a rule has no translation, 2 when the directory
//! or the output directory is unusable.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;

use super::output::stderr_line;
use crate::in_tree::{self, Policies};
use crate::plan::compile;
use crate::rules::load_dir;

/// Arguments of `kadmit policies`.
#[derive(Debug, Args)]
pub struct PoliciesArgs {
    /// Directory of rule files (its top-level *.yaml and *.yml files).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// Write one file per rule (`{ruleset}.{rule}.kadmit.dev.yaml`, its
    /// policies and bindings) into this directory instead of printing.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,

    /// Write the rules that translate even when some do not (those stay in
    /// the webhook); without it, any rule without a translation fails.
    #[arg(long)]
    pub partial: bool,
}

/// Prints or writes the policies.
pub fn run(args: PoliciesArgs) -> anyhow::Result<ExitCode> {
    let loaded = load_dir(&args.dir)?;
    let plan = match compile(&loaded) {
        Ok(plan) => plan,
        Err(diagnostics) => {
            for diagnostic in diagnostics.iter() {
                stderr_line(diagnostic);
            }
            return Ok(ExitCode::from(1));
        }
    };
    let policies = in_tree::policies(&plan);
    for untranslated in &policies.untranslated {
        stderr_line(format!(
            "{}/{}: not translated: {}",
            untranslated.rule_set, untranslated.rule, untranslated.reason
        ));
    }
    if !policies.untranslated.is_empty() && !args.partial {
        stderr_line(format!(
            "{} of {} rules have no in-tree form; pass --partial to write the others \
             and keep these in the webhook",
            policies.untranslated.len(),
            plan.rules().len()
        ));
        return Ok(ExitCode::from(1));
    }
    match &args.output_dir {
        Some(dir) => write_files(dir, &policies)?,
        None => {
            let text = in_tree::to_yaml(&policies)?;
            let mut stdout = std::io::stdout().lock();
            if let Err(error) = stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
            {
                // A closed pipe (`| head`) is the reader's choice, not a failure.
                if error.kind() != std::io::ErrorKind::BrokenPipe {
                    return Err(error).context("writing the policies");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn write_files(dir: &std::path::Path, policies: &Policies) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for policy in &policies.policies {
        let one = Policies {
            policies: vec![policy.clone()],
            untranslated: Vec::new(),
        };
        let name = in_tree::policy_name(&policy.rule_set, &policy.rule);
        let path = dir.join(format!("{name}.yaml"));
        std::fs::write(&path, in_tree::to_yaml(&one)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
