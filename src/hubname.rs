//! The names of Hugging Face hub repositories as users spell them, and the address of a
//! repository's `model.safetensors`: for every target, so the page, the package, the CLI and
//! the desktop app read a name alike (the downloads themselves: `crate::hub`, native).

use crate::error::{Error, Result};

/// The hub's default address.
pub const HUB: &str = "https://huggingface.co";

/// timm's prefixes of a model named on the hub (`timm.create_model("hf-hub:owner/name")`, and
/// the older `hf_hub:`): a string starting with one names a repository, not a file or URL.
pub const NAME_PREFIXES: [&str; 2] = ["hf-hub:", "hf_hub:"];

/// Whether `text` names a model as timm does, by one of [`NAME_PREFIXES`].
pub fn is_hub_name(text: &str) -> bool {
    NAME_PREFIXES.iter().any(|p| text.trim_start().starts_with(p))
}

/// Whether `text`, given where a file's path goes (the CLI's `--weights`, the desktop app's
/// path field), names a model on the hub instead: timm's name ([`is_hub_name`]) or an address
/// on huggingface.co. A bare `owner/name` ([`parse_repo`] takes it) is a relative path there,
/// so a file of that name keeps its meaning.
pub fn names_hub_model(text: &str) -> bool {
    let t = text.trim_start();
    is_hub_name(t) || HUB_HOSTS[..2].iter().any(|h| t.starts_with(h))
}

/// The address of `repo`'s `model.safetensors` on the hub at `base` (e.g. [`HUB`]).
pub fn model_url(base: &str, repo: &str) -> String {
    format!("{}/{repo}/resolve/main/model.safetensors", base.trim_end_matches('/'))
}

/// Whether `repo` is a repository name as the hub spells it: `owner/name`, each of letters,
/// digits and `-_.`, not starting with a dot (so no `..` reaches a URL or the cache's paths).
fn is_repo(repo: &str) -> bool {
    let ok = |s: &str| !s.is_empty() && !s.starts_with('.') && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    repo.split_once('/').is_some_and(|(owner, name)| ok(owner) && ok(name))
}

/// The hub's addresses a repository's page may be named by (`parse_repo`).
const HUB_HOSTS: [&str; 3] = ["https://huggingface.co/", "https://www.huggingface.co/", "huggingface.co/"];

/// The repository a user names, in any spelling they meet it in: `owner/name`; timm's
/// `hf-hub:owner/name` (and its older `hf_hub:`); or an address on the hub, the repository's
/// page or any file's (`https://huggingface.co/owner/name`, `…/tree/main`,
/// `…/blob/main/model.safetensors`). Anything else is an error saying what is expected.
pub fn parse_repo(text: &str) -> Result<String> {
    let t = text.trim();
    let t = NAME_PREFIXES.iter().find_map(|p| t.strip_prefix(p)).unwrap_or(t);
    let repo = match HUB_HOSTS.iter().find_map(|h| t.strip_prefix(h)) {
        Some(path) => path.split(['?', '#']).next().unwrap_or("").split('/').take(2).collect::<Vec<_>>().join("/"),
        None => t.to_string(),
    };
    if !is_repo(&repo) {
        return Err(Error::Input(format!(
            "hub repository `{t}`: expected owner/name (or hf-hub:owner/name, or its address on huggingface.co), e.g. timm/gmlp_s16_224.ra3_in1k"
        )));
    }
    Ok(repo)
}

#[cfg(test)]
mod tests {
    use super::parse_repo;

    #[test]
    fn a_repository_is_named_in_each_spelling_users_meet() {
        for text in [
            "timm/gmlp_s16_224.ra3_in1k",
            "  timm/gmlp_s16_224.ra3_in1k\n",
            "hf-hub:timm/gmlp_s16_224.ra3_in1k",
            "hf_hub:timm/gmlp_s16_224.ra3_in1k",
            "https://huggingface.co/timm/gmlp_s16_224.ra3_in1k",
            "https://huggingface.co/timm/gmlp_s16_224.ra3_in1k/",
            "https://huggingface.co/timm/gmlp_s16_224.ra3_in1k/tree/main",
            "https://huggingface.co/timm/gmlp_s16_224.ra3_in1k/blob/main/model.safetensors",
            "https://huggingface.co/timm/gmlp_s16_224.ra3_in1k/resolve/main/model.safetensors?download=true",
            "https://huggingface.co/timm/gmlp_s16_224.ra3_in1k#model-card",
            "huggingface.co/timm/gmlp_s16_224.ra3_in1k",
            "hf-hub:https://huggingface.co/timm/gmlp_s16_224.ra3_in1k",
        ] {
            assert_eq!(parse_repo(text).ok().as_deref(), Some("timm/gmlp_s16_224.ra3_in1k"), "{text:?}");
        }
        for text in
            ["", "timm", "hf-hub:", "https://huggingface.co/timm", "https://example.com/timm/x", "../etc/passwd", "timm/a b", "timm/.x", "a/b/c"]
        {
            let err = parse_repo(text).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains("expected owner/name"), "{text:?}: {err}");
        }
    }

    #[test]
    fn a_hub_name_is_told_from_a_url_and_gives_its_models_address() {
        for (text, named, in_a_path) in [
            ("hf-hub:timm/x", true, true),
            (" hf_hub:timm/x", true, true),
            ("timm/x", false, false),
            ("https://huggingface.co/timm/x", false, true),
            ("https://www.huggingface.co/timm/x/tree/main", false, true),
            ("huggingface.co/timm/x", false, false),
            ("models/hf-hub:x", false, false),
        ] {
            assert_eq!(super::is_hub_name(text), named, "{text:?}");
            assert_eq!(super::names_hub_model(text), in_a_path, "{text:?} in a path's place");
        }
        let url = "http://127.0.0.1:8/hub/timm/x/resolve/main/model.safetensors";
        assert_eq!(super::model_url("http://127.0.0.1:8/hub/", "timm/x"), url);
        assert_eq!(super::model_url(super::HUB, "timm/x"), "https://huggingface.co/timm/x/resolve/main/model.safetensors");
    }
}
