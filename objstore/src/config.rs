//! S3 credentials, endpoint and region, found where S3 users keep them.
//!
//! object_store reads `AWS_*` variables but not the shared files
//! `~/.aws/credentials` and `~/.aws/config`, which is what LUMI's
//! `lumio-conf` writes (a `[lumi-PROJECT]` section with the keys, a
//! `[profile lumi-PROJECT]` section with `endpoint_url`), so the files are
//! parsed here; they are simple INI. Precedence follows the AWS CLI:
//!
//! - keys: `--profile` names a profile and its keys win; otherwise
//!   `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`);
//!   otherwise the profile `AWS_PROFILE` names, or `default`; the
//!   credentials file beats the config file for the same profile. No keys
//!   at all means anonymous requests (public buckets).
//! - endpoint: `--endpoint`, `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, the
//!   profile's `endpoint_url` (also in an `s3 =` block), else AWS.
//! - region: `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region`,
//!   else `us-east-1` (custom endpoints such as LUMI-O ignore it, but
//!   signatures need one).
//!
//! A profile asked for by name (`--profile`, `AWS_PROFILE`) that neither file
//! has is an error naming the files, not a silent fall back to anonymous.

use crate::error::RemoteError;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What to sign requests with and where to send them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct S3Settings {
    /// `(access key id, secret access key, session token)`; None: anonymous.
    pub keys: Option<(String, String, Option<String>)>,
    pub endpoint: Option<String>,
    pub region: String,
    /// Where the keys came from, for messages ("environment", "profile x").
    pub keys_from: String,
}

/// The environment as a lookup, so tests can give their own.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Resolves settings from `env` (and the files it points to) and the flags.
pub fn resolve(
    env: Env,
    flag_endpoint: Option<&str>,
    flag_profile: Option<&str>,
) -> Result<S3Settings, RemoteError> {
    let get = |k: &str| env(k).filter(|v| !v.is_empty());
    let home = get("HOME").map(PathBuf::from);
    let file = |var: &str, name: &str| {
        get(var)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws").join(name)))
    };
    let cred_path = file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
    let conf_path = file("AWS_CONFIG_FILE", "config");
    let creds = read_ini(cred_path.as_deref())?;
    let conf = read_ini(conf_path.as_deref())?;

    let named = flag_profile
        .map(str::to_string)
        .or_else(|| get("AWS_PROFILE"));
    let profile_name = named.clone().unwrap_or_else(|| "default".into());
    // In the config file profiles are `[profile x]`, except `[default]`.
    let conf_section = |name: &str| {
        conf.get(&format!("profile {name}"))
            .or_else(|| (name == "default").then(|| conf.get("default")).flatten())
    };
    let in_creds = creds.get(&profile_name);
    let in_conf = conf_section(&profile_name);
    if named.is_some() && in_creds.is_none() && in_conf.is_none() {
        let shown = |p: &Option<PathBuf>| {
            p.as_ref()
                .map_or("(no HOME)".into(), |p| p.display().to_string())
        };
        return Err(RemoteError::Config(format!(
            "AWS profile {profile_name:?} not found in {} or {}",
            shown(&cred_path),
            shown(&conf_path)
        )));
    }
    let profile_value = |key: &str| {
        in_creds
            .and_then(|s| s.get(key))
            .or_else(|| in_conf.and_then(|s| s.get(key)))
            .cloned()
    };
    let profile_keys = || {
        Some((
            profile_value("aws_access_key_id")?,
            profile_value("aws_secret_access_key")?,
            profile_value("aws_session_token"),
        ))
    };
    let env_keys = || {
        Some((
            get("AWS_ACCESS_KEY_ID")?,
            get("AWS_SECRET_ACCESS_KEY")?,
            get("AWS_SESSION_TOKEN"),
        ))
    };
    let (keys, keys_from) = match flag_profile {
        Some(p) => (profile_keys(), format!("profile {p}")),
        None => match env_keys() {
            Some(k) => (Some(k), "environment".to_string()),
            None => (profile_keys(), format!("profile {profile_name}")),
        },
    };
    let keys_from = if keys.is_some() {
        keys_from
    } else {
        "none (anonymous)".into()
    };
    let endpoint = [
        (flag_endpoint.map(str::to_string), "--endpoint"),
        (get("AWS_ENDPOINT_URL_S3"), "AWS_ENDPOINT_URL_S3"),
        (get("AWS_ENDPOINT_URL"), "AWS_ENDPOINT_URL"),
        (
            profile_value("s3.endpoint_url"),
            "the profile's s3.endpoint_url",
        ),
        (profile_value("endpoint_url"), "the profile's endpoint_url"),
    ]
    .into_iter()
    .find_map(|(v, from)| v.map(|v| (v, from)));
    if let Some((e, from)) = &endpoint {
        check_endpoint(e, from)?;
    }
    let endpoint = endpoint.map(|(e, _)| e);
    let region = get("AWS_REGION")
        .or_else(|| get("AWS_DEFAULT_REGION"))
        .or_else(|| profile_value("region"))
        .unwrap_or_else(|| "us-east-1".into());
    Ok(S3Settings {
        keys,
        endpoint,
        region,
        keys_from,
    })
}

/// An endpoint is a URL with a scheme and a host: the S3 client takes
/// anything else for a request it cannot build, and panics. `from` names
/// where it was given, for the message.
pub fn check_endpoint(e: &str, from: &str) -> Result<(), RemoteError> {
    let host = e
        .strip_prefix("https://")
        .or_else(|| e.strip_prefix("http://"))
        .map(|rest| rest.split(['/', '?', '#']).next().unwrap_or(""));
    match host {
        Some(h) if !h.is_empty() && !e.chars().any(|c| c.is_whitespace() || c.is_control()) => {
            Ok(())
        }
        _ => Err(RemoteError::Config(format!(
            "endpoint {e:?} (from {from}): expected a URL such as https://host or http://host:port"
        ))),
    }
}

/// Sections of an INI file, keys lower-cased; a missing file is empty.
fn read_ini(path: Option<&Path>) -> Result<HashMap<String, HashMap<String, String>>, RemoteError> {
    let Some(path) = path else {
        return Ok(HashMap::new());
    };
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(parse_ini(&text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(HashMap::new()),
        Err(e) => Err(RemoteError::Config(format!("{}: {e}", path.display()))),
    }
}

/// Parses the AWS shared-file dialect: `[section]`, `key = value`, `#` and
/// `;` comments, and nested blocks (`s3 =` followed by indented lines),
/// whose keys are stored as `s3.key`.
pub fn parse_ini(text: &str) -> HashMap<String, HashMap<String, String>> {
    let mut out: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut section: Option<String> = None;
    let mut nested: Option<String> = None;
    for line in text.lines() {
        let indented = line.starts_with([' ', '\t']);
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        if let Some(name) = t.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            out.entry(name.clone()).or_default();
            section = Some(name);
            nested = None;
            continue;
        }
        let (Some(sec), Some((k, v))) = (&section, t.split_once('=')) else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
        if !indented {
            nested = v.is_empty().then(|| k.clone());
        }
        let key = match (&nested, indented) {
            (Some(n), true) => format!("{n}.{k}"),
            _ => k,
        };
        out.entry(sec.clone()).or_default().insert(key, v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A HOME with the two files as `lumio-conf` writes them.
    fn home(creds: &str, conf: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(".aws")).unwrap();
        std::fs::write(d.path().join(".aws/credentials"), creds).unwrap();
        std::fs::write(d.path().join(".aws/config"), conf).unwrap();
        d
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    const CREDS: &str = "[default]\naws_access_key_id = DEFKEY\naws_secret_access_key = DEFSECRET\n\n\
        # lumio-conf\n[lumi-465000001]\naws_access_key_id=LUMIKEY\naws_secret_access_key=LUMISECRET\n";
    const CONF: &str = "[default]\nregion = eu-north-1\n\n[profile lumi-465000001]\n\
        endpoint_url = https://lumidata.eu\nregion=lumi\n\n[profile nested]\ns3 =\n  endpoint_url = https://nested.example\n  addressing_style = path\nregion = r2\n\
        [profile conf-only]\naws_access_key_id = CK\naws_secret_access_key = CS\naws_session_token = CT\n";

    #[test]
    fn a_lumio_conf_profile_gives_its_keys_endpoint_and_region() {
        let h = home(CREDS, CONF);
        let hp = h.path().to_str().unwrap();
        let s = resolve(&env_of(&[("HOME", hp)]), None, Some("lumi-465000001")).unwrap();
        assert_eq!(s.keys, Some(("LUMIKEY".into(), "LUMISECRET".into(), None)));
        assert_eq!(s.endpoint.as_deref(), Some("https://lumidata.eu"));
        assert_eq!(s.region, "lumi");
        // The same through AWS_PROFILE.
        let s2 = resolve(
            &env_of(&[("HOME", hp), ("AWS_PROFILE", "lumi-465000001")]),
            None,
            None,
        )
        .unwrap();
        assert_eq!(s2, s);
    }

    /// Bug: an endpoint without a scheme (`127.0.0.1:9000`, as people
    /// write it) or with a stray space made the S3 client panic while
    /// signing the first request.
    #[test]
    fn an_endpoint_that_is_not_a_url_is_a_configuration_error_naming_it() {
        for (e, ok) in [
            ("http://127.0.0.1:9000", true),
            ("https://lumidata.eu/", true),
            ("127.0.0.1:9000", false),
            ("http://127.0.0.1:9000 ", false),
            ("http://", false),
            ("ftp://host", false),
        ] {
            let r = resolve(&env_of(&[("AWS_ENDPOINT_URL", e)]), None, None);
            assert_eq!(r.is_ok(), ok, "{e:?}: {r:?}");
            if let Err(err) = r {
                let m = err.to_string();
                assert!(
                    m.contains(&format!("{e:?}")) && m.contains("AWS_ENDPOINT_URL"),
                    "{m}"
                );
            }
        }
        let r = resolve(&env_of(&[]), Some("localhost:1"), None);
        assert!(r.unwrap_err().to_string().contains("--endpoint"));
    }

    #[test]
    fn precedence_flags_then_environment_then_profiles() {
        let h = home(CREDS, CONF);
        let hp = h.path().to_str().unwrap();
        let env = env_of(&[
            ("HOME", hp),
            ("AWS_ACCESS_KEY_ID", "ENVKEY"),
            ("AWS_SECRET_ACCESS_KEY", "ENVSECRET"),
            ("AWS_SESSION_TOKEN", "ENVTOKEN"),
            ("AWS_PROFILE", "lumi-465000001"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9000"),
            ("AWS_REGION", "eu-west-1"),
        ]);
        // Environment keys beat AWS_PROFILE's; the environment's endpoint
        // and region beat the profile's.
        let s = resolve(&env, None, None).unwrap();
        assert_eq!(
            s.keys,
            Some(("ENVKEY".into(), "ENVSECRET".into(), Some("ENVTOKEN".into())))
        );
        assert_eq!(s.keys_from, "environment");
        assert_eq!(s.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(s.region, "eu-west-1");
        // --profile beats the environment's keys; --endpoint beats all.
        let s = resolve(&env, Some("http://flag:1"), Some("default")).unwrap();
        assert_eq!(s.keys, Some(("DEFKEY".into(), "DEFSECRET".into(), None)));
        assert_eq!(s.endpoint.as_deref(), Some("http://flag:1"));
        // AWS_ENDPOINT_URL_S3 beats AWS_ENDPOINT_URL.
        let env2 = env_of(&[
            ("HOME", hp),
            ("AWS_ENDPOINT_URL", "http://a"),
            ("AWS_ENDPOINT_URL_S3", "http://b"),
        ]);
        assert_eq!(
            resolve(&env2, None, None).unwrap().endpoint.as_deref(),
            Some("http://b")
        );
        // Only one of the two env keys: not used; the default profile is.
        let env3 = env_of(&[("HOME", hp), ("AWS_ACCESS_KEY_ID", "ONLYKEY")]);
        let s = resolve(&env3, None, None).unwrap();
        assert_eq!(s.keys.unwrap().0, "DEFKEY");
        assert_eq!(s.region, "eu-north-1");
    }

    #[test]
    fn nested_blocks_config_only_keys_and_other_file_locations() {
        let h = home("", CONF);
        let hp = h.path().to_str().unwrap();
        let s = resolve(&env_of(&[("HOME", hp)]), None, Some("nested")).unwrap();
        assert_eq!(s.endpoint.as_deref(), Some("https://nested.example"));
        assert_eq!(s.region, "r2");
        assert_eq!(s.keys, None);
        let s = resolve(&env_of(&[("HOME", hp)]), None, Some("conf-only")).unwrap();
        assert_eq!(s.keys, Some(("CK".into(), "CS".into(), Some("CT".into()))));
        // AWS_SHARED_CREDENTIALS_FILE / AWS_CONFIG_FILE point elsewhere.
        let other = home("[x]\naws_access_key_id=XK\naws_secret_access_key=XS\n", "");
        let cf = other.path().join(".aws/credentials");
        let env = env_of(&[
            ("HOME", hp),
            ("AWS_SHARED_CREDENTIALS_FILE", cf.to_str().unwrap()),
        ]);
        assert_eq!(
            resolve(&env, None, Some("x")).unwrap().keys.unwrap().0,
            "XK"
        );
    }

    #[test]
    fn no_credentials_is_anonymous_but_a_missing_named_profile_is_an_error() {
        let empty = tempfile::tempdir().unwrap();
        let hp = empty.path().to_str().unwrap();
        let s = resolve(&env_of(&[("HOME", hp)]), None, None).unwrap();
        assert_eq!(s.keys, None);
        assert_eq!(s.keys_from, "none (anonymous)");
        assert_eq!(s.region, "us-east-1");
        assert_eq!(s.endpoint, None);
        let e = resolve(&env_of(&[("HOME", hp)]), None, Some("lumi-1"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"lumi-1\"") && e.contains(".aws/credentials"),
            "{e}"
        );
        let e = resolve(&env_of(&[("HOME", hp), ("AWS_PROFILE", "p")]), None, None).unwrap_err();
        assert!(e.to_string().contains("\"p\""), "{e}");
    }

    #[test]
    fn ini_dialect() {
        let m = parse_ini("; c\n[ profile  a ]\nK = v = w\n# x\n[b]\nx=1\n  y = nested-less\n");
        assert_eq!(m["profile a"]["k"], "v = w");
        // An indented line after a key with a value is a plain key.
        assert_eq!(m["b"]["y"], "nested-less");
        assert_eq!(m["b"]["x"], "1");
    }
}
