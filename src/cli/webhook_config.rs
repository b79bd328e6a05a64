//! `kadmit webhook-config DIR`: print the Mutating- and
//! ValidatingWebhookConfiguration that send the API server's requests for a
//! rule directory to kadmit.
//!
//! With `--diff INSTALLED.yaml` it prints instead what the installed
//! configurations (`kubectl get
//! validatingwebhookconfigurations,mutatingwebhookconfigurations -o yaml`)
//! would not send to kadmit that the rules match, and what they send
//! needlessly.
//!
//! Exit codes: 0 with the configurations on stdout (with `--diff`: nothing
//! the rules match goes unsent), 1 when the rules have problems (each
//! printed to stderr as `file:line:column: field: message (hint)`) or, with
//! `--diff`, when some request a rule matches is not sent, 2 when the
//! directory, the CA bundle, the installed file or the options are unusable.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{ArgGroup, Args, ValueEnum};

use super::output::{Output, stderr_line};
use crate::plan::compile;
use crate::rules::limits::MAX_FILE_BYTES;
use crate::rules::load_dir;
use crate::webhook::{self, Client, GenerateError, Layout, Options, ServiceRef, WebhookUrl};

/// How `--diff` prints its findings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DiffOutput {
    /// Lines for people.
    Text,
    /// One JSON object: `kadmitEntries`, `notSent`, `needless`.
    Json,
}

/// Arguments of `kadmit webhook-config`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("client").required(true).args(["service", "url"])))]
pub struct WebhookConfigArgs {
    /// Directory of rule files (its top-level *.yaml and *.yml files).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// The Service in front of kadmit, `NAMESPACE/NAME[:PORT]` (port 443 when omitted).
    #[arg(long, value_name = "NAMESPACE/NAME[:PORT]")]
    pub service: Option<ServiceRef>,

    /// An https:// URL to call instead of a Service, for kadmit outside the cluster.
    #[arg(long, value_name = "URL")]
    pub url: Option<WebhookUrl>,

    /// PEM file of the CA that signed kadmit's serving certificate, written
    /// base64-encoded into caBundle. Omit it when cert-manager injects the CA.
    #[arg(long, value_name = "FILE")]
    pub ca_bundle: Option<PathBuf>,

    /// One webhook entry per rule set, at /mutate/{ruleset} and
    /// /validate/{ruleset}, each with its own failure policy, timeout and
    /// namespace selector. Without it, rule sets the API server would treat
    /// alike share one entry, at a path naming them
    /// (/validate/images.services): fewer calls per request.
    #[arg(long, alias = "per-ruleset", conflicts_with = "single")]
    pub per_rule_set: bool,

    /// One catch-all entry at /mutate and /validate: one call per request
    /// rather than one per rule set; takes the strictest failure policy and
    /// the longest timeout.
    #[arg(long)]
    pub single: bool,

    /// Compare the webhook configurations installed in a cluster with what
    /// the rules need instead of printing new ones: the output of `kubectl
    /// get validatingwebhookconfigurations,mutatingwebhookconfigurations -o
    /// yaml` (or a YAML stream of the configurations).
    #[arg(long, value_name = "INSTALLED.yaml", conflicts_with_all = ["single", "per_rule_set", "ca_bundle"])]
    pub diff: Option<PathBuf>,

    /// How --diff prints what it found.
    #[arg(long, value_enum, default_value = "text", requires = "diff")]
    pub output: DiffOutput,

    /// The namespace kadmit runs in, which is never sent to kadmit (default:
    /// the --service namespace, else "kadmit").
    #[arg(long, value_name = "NAMESPACE")]
    pub kadmit_namespace: Option<String>,
}

/// Prints the configurations to stdout; rule problems go to stderr, one per
/// line, and exit with 1.
pub fn run(args: WebhookConfigArgs) -> anyhow::Result<ExitCode> {
    let loaded = load_dir(&args.dir)?;
    // Refuse rules the server would refuse to serve: a configuration that
    // sends requests to a plan that never loads is worse than none. Warnings
    // (paths no matched kind has) are printed to stderr and do not stop it.
    let plan = match compile(&loaded) {
        Ok(plan) => {
            for warning in plan.warnings().iter() {
                stderr_line(warning);
            }
            plan
        }
        Err(diagnostics) => return Ok(rule_problems(&args.dir, &diagnostics)),
    };
    let client = match (args.service, args.url) {
        (Some(service), _) => Client::Service(service),
        (None, Some(url)) => Client::Url(url),
        // clap's "client" group requires one of them.
        (None, None) => anyhow::bail!("either --service or --url is required"),
    };
    let mut options = Options::new(client);
    if args.single {
        options.layout = Layout::Single;
    } else if args.per_rule_set {
        options.layout = Layout::PerRuleSet;
    }
    if let Some(namespace) = args.kadmit_namespace {
        options.kadmit_namespace = namespace;
    }
    if let Some(path) = &args.ca_bundle {
        let pem = std::fs::read(path)
            .with_context(|| format!("cannot read the CA bundle {}", path.display()))?;
        options.ca_bundle_pem = Some(pem);
    }
    for warning in webhook::excluded_namespace_warnings(&plan, &options)
        .into_iter()
        .chain(webhook::mutation_order_warnings(&plan, &options))
    {
        stderr_line(warning);
    }
    if let Some(installed) = &args.diff {
        return diff(&args.dir, &plan, &options, installed, args.output);
    }
    match webhook::generate(&plan, &options) {
        Ok(configurations) => {
            let yaml = configurations.to_yaml()?;
            // `kadmit webhook-config ... | head` is not an error.
            Output::stdout()
                .write_all(yaml.as_bytes())
                .context("cannot write to stdout")?;
            Ok(ExitCode::SUCCESS)
        }
        Err(error @ GenerateError::CaBundle(_)) => {
            let path = args.ca_bundle.unwrap_or_default();
            Err(error).with_context(|| format!("cannot use {} as --ca-bundle", path.display()))
        }
        Err(error) => Err(error).with_context(|| {
            format!(
                "cannot generate webhook configurations for {}",
                args.dir.display()
            )
        }),
    }
}

/// Prints every rule problem, and says nothing was printed; exit code 1.
fn rule_problems(dir: &std::path::Path, diagnostics: &crate::rules::Diagnostics) -> ExitCode {
    for diagnostic in diagnostics.iter() {
        stderr_line(diagnostic);
    }
    stderr_line(format_args!(
        "{}: {} problem(s); no configuration printed",
        dir.display(),
        diagnostics.len()
    ));
    ExitCode::from(1)
}

/// `--diff`: reads the installed configurations and prints what differs;
/// exit code 1 when a request some rule matches is not sent.
fn diff(
    dir: &std::path::Path,
    plan: &crate::plan::Plan,
    options: &Options,
    installed: &std::path::Path,
    output: DiffOutput,
) -> anyhow::Result<ExitCode> {
    use std::io::Read as _;
    let name = installed.display().to_string();
    let mut text = String::new();
    // One byte more than the bound, so that a larger file is refused by the
    // bound's own message rather than read whole.
    std::fs::File::open(installed)
        .and_then(|file| file.take(MAX_FILE_BYTES + 1).read_to_string(&mut text))
        .with_context(|| format!("cannot read {name}"))?;
    let installed = webhook::read_installed(&name, &text)
        .with_context(|| format!("cannot compare {name} with the rules"))?;
    let found = match webhook::compare(plan, options, &installed) {
        Ok(found) => found,
        Err(error) => {
            return Err(error)
                .with_context(|| format!("cannot compare {name} with {}", dir.display()));
        }
    };
    let printed = match output {
        DiffOutput::Text => found.to_string(),
        DiffOutput::Json => format!("{}\n", serde_json::to_string(&found)?),
    };
    Output::stdout()
        .write_all(printed.as_bytes())
        .context("cannot write to stdout")?;
    Ok(if found.is_complete() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
