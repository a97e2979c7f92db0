//! Sizes a newcomer can read: files, parameter lists, and the settlement
//! engine's functions. Test modules (`#[cfg(test)]`) count towards their
//! file's length only; a trait implementation's parameters are the trait's.

use syn::spanned::Spanned;
use syn::visit::Visit;

const MAX_FILE_LINES: usize = 700;
/// A script longer than this is a program: it belongs in `xtask/`.
const MAX_SCRIPT_LINES: usize = 150;
const MAX_PARAMETERS: usize = 5;
/// For the settlement engine, where every branch is a rule.
const MAX_PIPELINE_FN_LINES: usize = 80;

struct Functions {
    found: Vec<Function>,
    /// Inside `impl Trait for Type`: the signature is the trait's.
    in_trait_impl: bool,
}

struct Function {
    name: String,
    lines: usize,
    parameters: usize,
    bool_parameters: Vec<String>,
}

impl Functions {
    fn add(&mut self, sig: &syn::Signature, body: Option<&syn::Block>) {
        let lines = body.map_or(0, |b| {
            b.span()
                .end()
                .line
                .saturating_sub(sig.fn_token.span().start().line)
                + 1
        });
        let trait_signature = self.in_trait_impl;
        let bool_parameters = sig
            .inputs
            .iter()
            .filter_map(|a| match a {
                syn::FnArg::Typed(t) if is_bool(&t.ty) => Some(quote_pat(&t.pat)),
                _ => None,
            })
            .collect();
        self.found.push(Function {
            name: sig.ident.to_string(),
            lines,
            parameters: if trait_signature { 0 } else { sig.inputs.len() },
            bool_parameters: if trait_signature {
                Vec::new()
            } else {
                bool_parameters
            },
        });
    }
}

fn is_bool(ty: &syn::Type) -> bool {
    matches!(ty, syn::Type::Path(p) if p.qself.is_none() && p.path.is_ident("bool"))
}

fn quote_pat(p: &syn::Pat) -> String {
    match p {
        syn::Pat::Ident(i) => i.ident.to_string(),
        _ => "_".into(),
    }
}

fn is_test_module(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
    })
}

impl<'ast> Visit<'ast> for Functions {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.add(&f.sig, Some(&f.block));
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        let outer = self.in_trait_impl;
        self.in_trait_impl = i.trait_.is_some();
        syn::visit::visit_item_impl(self, i);
        self.in_trait_impl = outer;
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.add(&f.sig, Some(&f.block));
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        self.add(&f.sig, f.default.as_ref());
        syn::visit::visit_trait_item_fn(self, f);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test_module(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }
}

#[test]
fn files_and_functions_stay_readable() {
    let mut problems = Vec::new();
    let all = super::crates();
    let files = all
        .iter()
        .flat_map(|(name, sources)| sources.iter().map(move |s| (name.as_str(), s)));
    for (krate, (path, module, text)) in files {
        let shown = path
            .strip_prefix(env!("CARGO_MANIFEST_DIR"))
            .unwrap_or(path)
            .display()
            .to_string();
        let text = text.as_str();
        let lines = text.lines().count();
        if lines > MAX_FILE_LINES {
            problems.push(format!("{shown}: {lines} lines (at most {MAX_FILE_LINES})"));
        }
        let file = syn::parse_file(text).unwrap();
        let mut functions = Functions {
            found: Vec::new(),
            in_trait_impl: false,
        };
        functions.visit_file(&file);
        let pipeline = krate == "src" && module.starts_with("crate::pipeline");
        for f in functions.found {
            if f.parameters > MAX_PARAMETERS {
                problems.push(format!(
                    "{shown}: fn {} takes {} parameters (at most {MAX_PARAMETERS}: a context or options struct)",
                    f.name, f.parameters
                ));
            }
            if !f.bool_parameters.is_empty() {
                problems.push(format!(
                    "{shown}: fn {} takes bool {} (an enum says what it selects)",
                    f.name,
                    f.bool_parameters.join(", ")
                ));
            }
            if pipeline && f.lines > MAX_PIPELINE_FN_LINES {
                problems.push(format!(
                    "{shown}: fn {} is {} lines (at most {MAX_PIPELINE_FN_LINES} in the settlement engine)",
                    f.name, f.lines
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn scripts_stay_short() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    let mut problems = Vec::new();
    let mut scripts = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        // Data the scripts read (Maven's project file) is no script.
        if path.extension().is_some_and(|e| e == "xml") || !path.is_file() {
            continue;
        }
        scripts += 1;
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        if lines > MAX_SCRIPT_LINES {
            problems.push(format!(
                "scripts/{}: {lines} lines (at most {MAX_SCRIPT_LINES}: move its logic into xtask/)",
                path.file_name().unwrap().to_string_lossy()
            ));
        }
    }
    assert!(scripts >= 10, "the scripts moved: {scripts}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
