//! `connector-config import`: a Debezium deployment's configuration made
//! into the relay's. What the relay reproduces byte for byte is carried
//! over (the table, the router's options, the converters, the slot, the
//! publication, the password as a reference); anything it cannot honour is
//! refused with a code and the setting's name, every one at once; what
//! decides no byte of the router's records is left behind and said.

mod judge;
mod legacy;
mod read;
mod values;
mod write;

pub use judge::{judge, Given, Imported, Refusal};
pub use legacy::Release;
pub use read::{read, worker, Deployment, Source};
pub use write::render;

use crate::error::{Code, Error};

/// What an import made: the relay's configuration file and what it read.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub text: String,
    pub imported: Imported,
}

/// Reads `text` (the file `from`) and makes the relay's configuration of
/// it; `given` says what the file does not (the brokers a Connect worker's
/// are its own, the worker's converters, the release). Refusals come back
/// all together; the file made is read back as the relay reads its
/// configuration before it is given, every reference in it standing for a
/// value.
pub fn import(
    text: &str,
    from: &str,
    source: Option<Source>,
    given: &Given,
) -> Result<Result<Outcome, Vec<Refusal>>, Error> {
    let deployment = read(text, source)?;
    let bootstrap = match (given.bootstrap.as_deref(), &deployment.bootstrap_servers) {
        (Some(b), _) => b.to_string(),
        (None, Some(b)) => b.clone(),
        (None, None) => {
            return Err(Error::new(
                Code::ARGUMENT_INVALID,
                format!(
                    "a {} names no brokers (the worker's are its own): pass --bootstrap-servers",
                    deployment.source.as_str()
                ),
            ))
        }
    };
    let imported = match judge(&deployment, given, &bootstrap) {
        Ok(i) => i,
        Err(refused) => return Ok(Err(refused)),
    };
    let text = render(&imported, from);
    // A reference stands for a value where the relay runs: a number
    // serves for every key it can be written for. The relay's own
    // overrides stay unset.
    let stands =
        |name: &str| (!name.starts_with(crate::config::ENV_PREFIX)).then(|| "1".to_string());
    if let Err(e) = crate::config::Config::parse(&text, std::path::Path::new(from), &stands) {
        return Ok(Err(vec![Refusal {
            code: e.code(),
            setting: "(the configuration made)".into(),
            why: e.detail().to_string(),
        }]));
    }
    Ok(Ok(Outcome { text, imported }))
}

#[cfg(test)]
mod tests;
