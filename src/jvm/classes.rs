//! Remapping bare class names: exceptions (`type` and `module`) and the request's
//! `classes` list (class names from view hierarchies and the like).

use proguard::ProguardCache;

use super::interface::JvmException;

/// The exception with its class remapped by the first mapping that knows it; `None`
/// when none does.
pub fn remap_exception(
    mappers: &[&ProguardCache<'_>],
    exception: &JvmException,
) -> Option<JvmException> {
    let class = remap_class_name(mappers, &exception.full_class_name())?;
    // A class that R8 kept in (or moved to) the root package has no package part.
    let (module, ty) = class.rsplit_once('.').unwrap_or(("", class));
    Some(JvmException {
        ty: ty.to_owned(),
        module: module.to_owned(),
    })
}

/// The original name of the obfuscated class `class`, from the first mapping that knows it.
pub fn remap_class_name<'a>(mappers: &[&'a ProguardCache<'a>], class: &str) -> Option<&'a str> {
    mappers.iter().find_map(|mapper| mapper.remap_class(class))
}
