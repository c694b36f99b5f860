//! An endpoint's file uploads: the settings (limits and allowed types) as stored in
//! `endpoints.file_uploads` and their rules, and the judgement of a file's type from its
//! first bytes (docs/intake.md, "Files").

use serde::{Deserialize, Serialize};

/// The most files a submission may carry, whatever an endpoint sets.
pub const MAX_FILES: i32 = 100;
/// The largest file and the largest total an endpoint may allow: 2 GiB less a byte, the
/// largest GraphQL `Int`.
pub const MAX_BYTES: i64 = i32::MAX as i64;
/// The most entries an allow-list holds.
const MAX_TYPES: usize = 100;

/// What an endpoint that takes no word on types allows: pictures, PDF, plain text and
/// CSV, and office documents (OOXML, OpenDocument, the old binary formats, RTF). Never
/// SVG or HTML, which a browser runs scripts in.
pub const DEFAULT_ALLOWED_TYPES: &[&str] = &[
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "image/heif",
    "image/avif",
    "image/bmp",
    "image/tiff",
    "application/pdf",
    "text/plain",
    "text/csv",
    "application/rtf",
    "application/msword",
    "application/vnd.ms-excel",
    "application/vnd.ms-powerpoint",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "application/vnd.oasis.opendocument.text",
    "application/vnd.oasis.opendocument.spreadsheet",
    "application/vnd.oasis.opendocument.presentation",
];

/// An endpoint's file settings, stored as JSON (`endpoints.file_uploads`; NULL: off).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileUploadSettings {
    /// Files per submission.
    pub max_files: i32,
    /// Bytes per file.
    pub max_file_bytes: i64,
    /// Bytes of all a submission's files together.
    pub max_total_bytes: i64,
    /// Media types (`image/png`) or families (`image/*`) a file's content may be.
    pub allowed_types: Vec<String>,
}

impl Default for FileUploadSettings {
    fn default() -> Self {
        FileUploadSettings {
            max_files: 5,
            max_file_bytes: 10 << 20,
            max_total_bytes: 25 << 20,
            allowed_types: DEFAULT_ALLOWED_TYPES
                .iter()
                .map(|t| t.to_string())
                .collect(),
        }
    }
}

/// A file setting that breaks its rule: the setting's GraphQL name and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: {reason}")]
pub struct FileSettingError {
    pub setting: &'static str,
    pub reason: &'static str,
}

impl FileUploadSettings {
    /// The settings if they keep every rule.
    pub fn validated(self) -> Result<FileUploadSettings, FileSettingError> {
        let wrong = |setting, reason| Err(FileSettingError { setting, reason });
        if !(1..=MAX_FILES).contains(&self.max_files) {
            return wrong("maxFiles", "must be 1 to 100");
        }
        if !(1..=MAX_BYTES).contains(&self.max_file_bytes) {
            return wrong("maxFileBytes", "must be 1 to 2147483647");
        }
        if !(1..=MAX_BYTES).contains(&self.max_total_bytes) {
            return wrong("maxTotalBytes", "must be 1 to 2147483647");
        }
        if self.max_total_bytes < self.max_file_bytes {
            return wrong("maxTotalBytes", "must be at least maxFileBytes");
        }
        if self.allowed_types.is_empty() || self.allowed_types.len() > MAX_TYPES {
            return wrong("allowedTypes", "must list 1 to 100 media types");
        }
        let mut types = Vec::with_capacity(self.allowed_types.len());
        for raw in &self.allowed_types {
            let kind = raw.trim().to_ascii_lowercase();
            if !is_media_range(&kind) {
                return wrong(
                    "allowedTypes",
                    "each must be a media type such as image/png, or a family such as image/*",
                );
            }
            if is_executable_type(&kind) {
                return wrong("allowedTypes", "executables are never allowed");
            }
            if !types.contains(&kind) {
                types.push(kind);
            }
        }
        Ok(FileUploadSettings {
            allowed_types: types,
            ..self
        })
    }

    /// Whether `content_type` (as judged) is on the allow-list.
    pub fn allows(&self, content_type: &str) -> bool {
        self.allowed_types.iter().any(|allowed| {
            allowed == content_type
                || allowed
                    .strip_suffix("/*")
                    .is_some_and(|family| content_type.split('/').next() == Some(family))
        })
    }
}

/// `type/subtype` or `type/*`, each a token of lowercase letters, digits and `.+-`.
fn is_media_range(text: &str) -> bool {
    let token = |part: &str| {
        !part.is_empty()
            && part.len() <= 100
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-+.".contains(&b))
    };
    match text.split_once('/') {
        Some((kind, "*")) => token(kind),
        Some((kind, sub)) => token(kind) && token(sub),
        None => false,
    }
}

/// The types the judgement gives executables: refused whatever an allow-list says.
const EXECUTABLE_TYPES: &[&str] = &[
    "application/x-executable",
    "application/vnd.microsoft.portable-executable",
    "application/x-mach-binary",
    "application/x-shellscript",
    "application/wasm",
    "application/java-vm",
    "application/vnd.android.dex",
    "application/vnd.android.dey",
    "application/x-msdownload",
    "application/x-sharedlib",
    "application/x-object",
];

fn is_executable_type(kind: &str) -> bool {
    EXECUTABLE_TYPES.contains(&kind)
}

/// The longest start of a file the judgement reads: enough for every signature `infer`
/// knows, including the office formats found inside a ZIP's first entries.
pub const SNIFF_BYTES: usize = 8192;

/// What the first bytes of a file say it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged {
    /// A media type: the allow-list decides.
    Type(String),
    /// A program (ELF, PE, Mach-O, a script with `#!`, WebAssembly, Java or Dalvik
    /// bytecode): refused always. The type names what it is.
    Executable(&'static str),
}

/// Judges a file by its content (`start`: its first [`SNIFF_BYTES`], or all of it if
/// shorter), never by the name or the type the client sent, except that text which is
/// not recognisable otherwise is `text/csv` when the name ends in `.csv`.
pub fn judge(start: &[u8], file_name: &str) -> Judged {
    if start.starts_with(b"#!") {
        return Judged::Executable("application/x-shellscript");
    }
    // The programs' own magic numbers first: infer wants more of a header than a short
    // (or cut) file may have, and a program must never pass for lack of bytes.
    if start.starts_with(b"MZ") {
        return Judged::Executable("application/vnd.microsoft.portable-executable");
    }
    if start.starts_with(b"\x7fELF") {
        return Judged::Executable("application/x-executable");
    }
    const MACH_O: [[u8; 4]; 5] = [
        [0xfe, 0xed, 0xfa, 0xce],
        [0xfe, 0xed, 0xfa, 0xcf],
        [0xce, 0xfa, 0xed, 0xfe],
        [0xcf, 0xfa, 0xed, 0xfe],
        // Also a Java class file: a program either way.
        [0xca, 0xfe, 0xba, 0xbe],
    ];
    if MACH_O.iter().any(|magic| start.starts_with(magic)) {
        return Judged::Executable("application/x-mach-binary");
    }
    if start.starts_with(b"\0asm") {
        return Judged::Executable("application/wasm");
    }
    if let Some(kind) = infer::get(start) {
        if kind.matcher_type() == infer::MatcherType::App {
            let executable = match kind.mime_type() {
                "application/x-executable" => "application/x-executable",
                "application/x-mach-binary" => "application/x-mach-binary",
                "application/wasm" => "application/wasm",
                "application/java-vm" | "application/x-java-applet" => "application/java-vm",
                "application/vnd.android.dex" => "application/vnd.android.dex",
                "application/vnd.android.dey" => "application/vnd.android.dey",
                "application/x-msdownload" => "application/x-msdownload",
                // Every other program format infer knows (COFF objects, LLVM bitcode…).
                _ => "application/x-object",
            };
            return Judged::Executable(executable);
        }
        return Judged::Type(kind.mime_type().to_string());
    }
    if looks_like_text(start) {
        let csv = file_name.to_ascii_lowercase().ends_with(".csv");
        return Judged::Type(if csv { "text/csv" } else { "text/plain" }.to_string());
    }
    Judged::Type("application/octet-stream".to_string())
}

/// The extensions a file name may end in for each type the judgement gives the default
/// allow-list's types (and text's common spellings): a name must agree with its content,
/// so that a file saved under its name is opened as what it is (an SVG or an HTML page
/// judged `text/plain` must not be kept as `x.svg`, which a browser would run).
const EXTENSIONS: &[(&str, &[&str])] = &[
    ("image/png", &["png"]),
    ("image/jpeg", &["jpg", "jpeg", "jpe", "jfif"]),
    ("image/gif", &["gif"]),
    ("image/webp", &["webp"]),
    ("image/heif", &["heif", "heic"]),
    ("image/avif", &["avif"]),
    ("image/bmp", &["bmp", "dib"]),
    ("image/tiff", &["tif", "tiff"]),
    ("application/pdf", &["pdf"]),
    (
        "text/plain",
        &[
            "txt", "text", "log", "md", "markdown", "json", "yaml", "yml", "ini", "cfg", "conf",
            "tsv", "vtt", "srt",
        ],
    ),
    ("text/csv", &["csv"]),
    ("application/rtf", &["rtf"]),
    ("application/msword", &["doc", "dot"]),
    ("application/vnd.ms-excel", &["xls", "xlt"]),
    ("application/vnd.ms-powerpoint", &["ppt", "pps", "pot"]),
    (
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        &["docx", "dotx"],
    ),
    (
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        &["xlsx", "xltx"],
    ),
    (
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        &["pptx", "ppsx", "potx"],
    ),
    ("application/vnd.oasis.opendocument.text", &["odt"]),
    ("application/vnd.oasis.opendocument.spreadsheet", &["ods"]),
    ("application/vnd.oasis.opendocument.presentation", &["odp"]),
];

/// Extensions of content a browser or a desktop runs or renders as a page: never the
/// name of a file whose type has no extensions of its own (`application/octet-stream`).
const ACTIVE_EXTENSIONS: &[&str] = &[
    "htm", "html", "xhtml", "xht", "shtml", "mht", "mhtml", "svg", "svgz", "xml", "xsl", "xslt",
    "js", "mjs", "cjs", "hta", "swf", "php", "jsp", "asp", "aspx", "exe", "com", "bat", "cmd",
    "ps1", "psm1", "vbs", "vbe", "jse", "wsf", "wsh", "scr", "pif", "msi", "msp", "dll", "cpl",
    "lnk", "url", "jar", "sh", "bash", "zsh", "command", "app", "desktop", "appimage", "deb",
    "rpm", "apk", "reg", "inf", "chm", "pl", "py", "rb",
];

/// The extension a name claims: what follows its last `.`, lower-cased; `None` for a name
/// without a `.` (it claims no type).
fn extension(name: &str) -> Option<String> {
    name.rsplit_once('.')
        .map(|(_, extension)| extension.to_lowercase())
}

/// Whether a file's `name` agrees with `content_type`, the type judged from `start`: a
/// name without an extension always does; otherwise its extension must be one of the
/// type's ([`EXTENSIONS`], else the one `infer` gives the content), and a type that has
/// none (`application/octet-stream`) may not take an extension that claims another type
/// or content that runs.
pub fn name_agrees(content_type: &str, start: &[u8], name: &str) -> bool {
    let Some(extension) = extension(name) else {
        return true;
    };
    if let Some((_, known)) = EXTENSIONS.iter().find(|(kind, _)| *kind == content_type) {
        return known.contains(&extension.as_str());
    }
    let inferred = infer::get(start);
    if inferred
        .is_some_and(|kind| kind.mime_type() == content_type && kind.extension() == extension)
    {
        return true;
    }
    let claimed = EXTENSIONS
        .iter()
        .any(|(_, known)| known.contains(&extension.as_str()))
        || ACTIVE_EXTENSIONS.contains(&extension.as_str())
        || inferred.is_some();
    !claimed
}

/// UTF-8 (a character cut at the end of `start` allowed) without NUL or control
/// characters other than tab, line feed, carriage return and form feed.
fn looks_like_text(start: &[u8]) -> bool {
    let valid = match std::str::from_utf8(start) {
        Ok(text) => text,
        // Cut inside a character at the very end: the part before it.
        Err(error) if error.error_len().is_none() && start.len() - error.valid_up_to() < 4 => {
            match std::str::from_utf8(&start[..error.valid_up_to()]) {
                Ok(text) => text,
                Err(_) => return false,
            }
        }
        Err(_) => return false,
    };
    valid
        .chars()
        .all(|c| !c.is_control() || matches!(c, '\t' | '\n' | '\r' | '\u{c}'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_executables_whatever_their_name() {
        let elf = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x02\0\x3e\0\x01\0\0\0";
        assert_eq!(
            judge(elf, "photo.png"),
            Judged::Executable("application/x-executable")
        );
        let mut long_elf = elf.to_vec();
        long_elf.resize(4096, 0);
        assert!(matches!(
            judge(&long_elf, "photo.png"),
            Judged::Executable(_)
        ));
        assert!(matches!(
            judge(b"#!/bin/sh\necho hi\n", "notes.txt"),
            Judged::Executable("application/x-shellscript")
        ));
        assert!(matches!(
            judge(b"MZ\x90\0\x03", "cv.pdf"),
            Judged::Executable(_)
        ));
        assert!(matches!(
            judge(b"\xcf\xfa\xed\xfe\x07\0\0\x01", "a.jpg"),
            Judged::Executable(_)
        ));
    }

    #[test]
    fn content_decides_the_type() {
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
        assert_eq!(judge(png, "x.txt"), Judged::Type("image/png".into()));
        assert_eq!(
            judge(b"%PDF-1.7\n", "cv"),
            Judged::Type("application/pdf".into())
        );
        assert_eq!(
            judge("a,b\n1,\u{e9}".as_bytes(), "t.CSV"),
            Judged::Type("text/csv".into())
        );
        assert_eq!(
            judge(b"hello\n", "t.png"),
            Judged::Type("text/plain".into())
        );
        assert_eq!(
            judge(b"\0\x01\x02binary", "t.txt"),
            Judged::Type("application/octet-stream".into())
        );
        // A character cut by the sniff window is still text.
        assert_eq!(
            judge(&"é".as_bytes()[..1], "t"),
            Judged::Type("text/plain".into())
        );
    }

    #[test]
    fn names_agree_with_the_judged_type_or_are_refused() {
        let svg = b"<svg xmlns=\"http://www.w3.org/2000/svg\"><script>alert(1)</script></svg>";
        let Judged::Type(kind) = judge(svg, "x.svg") else {
            panic!("text")
        };
        assert_eq!(kind, "text/plain");
        for name in [
            "x.svg",
            "X.SVG",
            "x.html",
            "x.txt.htm",
            "x.js",
            "x.png",
            ".svg",
        ] {
            assert!(!name_agrees(&kind, svg, name), "{name}");
        }
        for name in ["x.txt", "notes.MD", "x", "README"] {
            assert!(name_agrees(&kind, svg, name), "{name}");
        }
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
        assert!(name_agrees("image/png", png, "cat.PNG"));
        assert!(!name_agrees("image/png", png, "cat.jpg"));
        assert!(!name_agrees("image/png", png, "cat.svg"));
        // A type without extensions of its own: anything that claims no other type.
        let binary = b"\0\x01\x02binary";
        assert!(name_agrees("application/octet-stream", binary, "data.bin"));
        assert!(!name_agrees("application/octet-stream", binary, "data.svg"));
        assert!(!name_agrees("application/octet-stream", binary, "data.pdf"));
        // A type infer knows beyond the table: its own extension.
        let zip = b"PK\x03\x04\x14\0\0\0\0\0";
        if let Judged::Type(kind) = judge(zip, "a.zip") {
            assert!(name_agrees(&kind, zip, "a.zip"), "{kind}");
            assert!(!name_agrees(&kind, zip, "a.html"), "{kind}");
        }
    }

    #[test]
    fn settings_rules() {
        let good = FileUploadSettings::default().validated().unwrap();
        assert!(good.allows("image/png") && good.allows("application/pdf"));
        assert!(!good.allows("application/zip") && !good.allows("image/svg+xml"));
        let family = FileUploadSettings {
            allowed_types: vec![" Image/* ".into()],
            ..FileUploadSettings::default()
        }
        .validated()
        .unwrap();
        assert_eq!(family.allowed_types, vec!["image/*".to_string()]);
        assert!(family.allows("image/webp") && !family.allows("text/plain"));
        for (bad, setting) in [
            (
                FileUploadSettings {
                    max_files: 0,
                    ..Default::default()
                },
                "maxFiles",
            ),
            (
                FileUploadSettings {
                    max_file_bytes: 0,
                    ..Default::default()
                },
                "maxFileBytes",
            ),
            (
                FileUploadSettings {
                    max_file_bytes: 10,
                    max_total_bytes: 5,
                    ..Default::default()
                },
                "maxTotalBytes",
            ),
            (
                FileUploadSettings {
                    allowed_types: vec![],
                    ..Default::default()
                },
                "allowedTypes",
            ),
            (
                FileUploadSettings {
                    allowed_types: vec!["png".into()],
                    ..Default::default()
                },
                "allowedTypes",
            ),
            (
                FileUploadSettings {
                    allowed_types: vec!["application/x-executable".into()],
                    ..Default::default()
                },
                "allowedTypes",
            ),
        ] {
            assert_eq!(bad.validated().unwrap_err().setting, setting);
        }
    }
}
