//! Class labels: a model's own, from its file's metadata; else, for a 1000-class model (timm's
//! ImageNet-1k checkpoints carry no labels), ImageNet-1k's class names in timm's class order
//! (`www/imagenet_labels.json`, the list the page loads); else "class N".

use std::sync::OnceLock;

use crate::models::ModelInfo;

/// ImageNet-1k's class names: the first WordNet lemma of each synset, in class-index order, as
/// the page has them (made from timm's `imagenet_synsets.txt` and
/// `imagenet_synset_to_lemma.txt`; see `www/page.js`).
pub fn imagenet() -> &'static [String] {
    static NAMES: OnceLock<Vec<String>> = OnceLock::new();
    // Data of this crate, not the user's: checked by the tests below.
    NAMES.get_or_init(|| serde_json::from_str(include_str!("../www/imagenet_labels.json")).unwrap_or_default())
}

/// Where a model's class names come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The model file's metadata.
    File,
    /// None in the file; the model has ImageNet-1k's 1000 classes.
    ImageNet,
    /// None: "class N".
    Numbers,
}

impl Source {
    pub fn of(info: &ModelInfo) -> Source {
        if !info.labels.is_empty() {
            Source::File
        } else if info.arch.num_classes() == imagenet().len() {
            Source::ImageNet
        } else {
            Source::Numbers
        }
    }

    /// As `info --json` says it (`"label_source"`).
    pub fn key(self) -> &'static str {
        match self {
            Source::File => "file",
            Source::ImageNet => "imagenet-1k",
            Source::Numbers => "none",
        }
    }

    /// In words, for `info` and the windows.
    pub fn describe(self) -> &'static str {
        match self {
            Source::File => "from the model file",
            Source::ImageNet => "ImageNet-1k's (none in the file; timm's class order)",
            Source::Numbers => "none in the file: class numbers",
        }
    }
}

/// The names of `info`'s classes ([`Source`]); empty where there are none.
pub fn names(info: &ModelInfo) -> &[String] {
    match Source::of(info) {
        Source::File => &info.labels,
        Source::ImageNet => imagenet(),
        Source::Numbers => &[],
    }
}

/// Class `index`'s name: [`names`], else "class N".
pub fn label(info: &ModelInfo, index: usize) -> String {
    names(info).get(index).cloned().unwrap_or_else(|| format!("class {index}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imagenet_names_are_the_thousand_in_class_order() {
        let names = imagenet();
        assert_eq!(names.len(), 1000);
        // Spot checks against torchvision's / timm's ImageNet-1k order.
        assert_eq!((names[0].as_str(), names[1].as_str(), names[281].as_str(), names[999].as_str()), ("tench", "goldfish", "tabby", "toilet tissue"));
    }
}
