//! `kadmit webhook-config DIR`: print the Mutating- and
//! ValidatingWebhookConfiguration that send the API server's requests for a
//! rule directory to kadmit.
//!
//! Exit codes: 0 with the configurations on stdout, 1 when the rules have
//! problems (each printed to stderr as `file:line:column: field: message
//! (hint)`), 2 when the directory, the CA bundle or the options are unusable.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{ArgGroup, Args};

use super::output::{Output, stderr_line};
use crate::plan::compile;
use crate::rules::load_dir;
use crate::webhook::{self, Client, GenerateError, Layout, Options, ServiceRef, WebhookUrl};

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
    // sends requests to a plan that never loads is worse than none.
    let diagnostics = compile(&loaded).err();
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
    let result = match diagnostics {
        Some(diagnostics) => Err(GenerateError::Rules(diagnostics)),
        None => webhook::generate(&loaded, &options),
    };
    match result {
        Ok(configurations) => {
            let yaml = configurations.to_yaml()?;
            // `kadmit webhook-config ... | head` is not an error.
            Output::stdout()
                .write_all(yaml.as_bytes())
                .context("cannot write to stdout")?;
            Ok(ExitCode::SUCCESS)
        }
        Err(GenerateError::Rules(diagnostics)) => {
            for diagnostic in diagnostics.iter() {
                stderr_line(diagnostic);
            }
            stderr_line(format_args!(
                "{}: {} problem(s); no configuration printed",
                args.dir.display(),
                diagnostics.len()
            ));
            Ok(ExitCode::from(1))
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
