//! Apple crash reports (the `.crash` text macOS and iOS write): parsed into modules and
//! threads, symbolicated like any native event, and answered with the report's system
//! and crash metadata.

use std::io::Read;
use std::sync::LazyLock;

use anyhow::Context;
use apple_crash_report_parser::AppleCrashReport;
use symbolic::common::{Arch, CodeId, DebugId};

use super::interface::{
    CompleteObjectInfo, CompletedSymbolicationResponse, HexValue, RawFrame, RawObjectInfo,
    RawStacktrace, SystemInfo,
};
use crate::sources::ObjectType;

/// A parsed report: what to symbolicate, and what to add to the answer afterwards.
pub struct ParsedReport {
    pub modules: Vec<CompleteObjectInfo>,
    pub stacktraces: Vec<RawStacktrace>,
    pub metadata: ReportMetadata,
}

/// The report's metadata, kept aside while its stacks are symbolicated.
pub struct ReportMetadata {
    timestamp: Option<u64>,
    system_info: SystemInfo,
    crash_reason: Option<String>,
    crash_details: Option<String>,
}

/// How Unreal Engine on macOS writes the OS version.
static MAC_OS_X: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"^Mac OS X (?P<version>\d+\.\d+\.\d+)( \((?P<build>[a-fA-F0-9]+)\))?$")
        .expect("the pattern is valid")
});

pub fn parse(reader: impl Read) -> anyhow::Result<ParsedReport> {
    let report =
        AppleCrashReport::from_reader(reader).context("failed to parse apple crash report")?;
    let mut metadata = report.metadata;
    let arch: Arch = report
        .code_type
        .as_deref()
        .and_then(|code_type| code_type.split(' ').next())
        .and_then(|word| word.parse().ok())
        .unwrap_or_default();

    let modules = report
        .binary_images
        .into_iter()
        .map(|image| {
            CompleteObjectInfo::from(RawObjectInfo {
                ty: ObjectType::Macho,
                code_id: Some(CodeId::from_binary(image.uuid.as_bytes()).to_string()),
                code_file: Some(image.path.clone()),
                debug_id: Some(DebugId::from_uuid(image.uuid).to_string()),
                debug_file: Some(image.path),
                debug_checksum: None,
                image_addr: HexValue(image.addr.0),
                image_size: (image.size != 0).then_some(image.size),
                file_id: None,
            })
        })
        .collect();

    let stacktraces = report
        .threads
        .into_iter()
        .map(|thread| RawStacktrace {
            thread_id: Some(thread.id),
            thread_name: thread.name,
            is_requesting: Some(thread.crashed),
            registers: thread
                .registers
                .unwrap_or_default()
                .into_iter()
                .map(|(name, addr)| (name, HexValue(addr.0)))
                .collect(),
            frames: thread
                .frames
                .into_iter()
                .map(|frame| RawFrame {
                    instruction_addr: HexValue(frame.instruction_addr.0),
                    package: frame.module,
                    ..RawFrame::default()
                })
                .collect(),
        })
        .collect();

    let mut system_info = SystemInfo {
        os_name: metadata.remove("OS Version").unwrap_or_default(),
        device_model: metadata.remove("Hardware Model").unwrap_or_default(),
        cpu_arch: arch,
        ..SystemInfo::default()
    };
    if let Some(captures) = MAC_OS_X.captures(&system_info.os_name) {
        let group = |name| {
            captures
                .name(name)
                .map(|m| m.as_str().to_owned())
                .unwrap_or_default()
        };
        system_info.os_version = group("version");
        system_info.os_build = group("build");
        system_info.os_name = "macOS".to_owned();
    }

    // Where each piece lives: https://developer.apple.com/library/archive/technotes/tn2151/
    let crash_reason = metadata.remove("Exception Type");
    let crash_details = report
        .application_specific_information
        .or_else(|| metadata.remove("Exception Message"))
        .or_else(|| metadata.remove("Exception Subtype"))
        .or_else(|| metadata.remove("Exception Codes"));

    Ok(ParsedReport {
        modules,
        stacktraces,
        metadata: ReportMetadata {
            timestamp: report
                .timestamp
                .and_then(|t| u64::try_from(t.timestamp()).ok()),
            system_info,
            crash_reason,
            crash_details,
        },
    })
}

impl ReportMetadata {
    pub fn merge_into(self, response: &mut CompletedSymbolicationResponse) {
        let mut state = self;
        state.system_info.fill_arch_from(&response.modules);
        response.timestamp = state.timestamp;
        response.system_info = Some(state.system_info);
        response.crash_reason = state.crash_reason;
        response.crash_details = state.crash_details;
        response.crashed = Some(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "Incident Identifier: 9A4B7C21-6E0D-4F38-B2C5-7D1E3F905A68
CrashReporter Key:   7f3c2a91d0e84b56c1a9e2f4b8d06c7e13a5f920
Hardware Model:      Macmini8,1
Process:         birdfeeder [31337]
Path:            /Users/dev/birdfeeder
Identifier:      birdfeeder
Version:         2.3
Code Type:       X86-64 (Native)
Parent Process:  launchd [1]
Date/Time:       2025-06-14 09:12:45.000 +0200
OS Version:      Mac OS X 10.15.5 (19F101)
Report Version:  12

Exception Type:  EXC_BAD_ACCESS (SIGBUS)
Exception Codes: KERN_PROTECTION_FAILURE at 0x0000000000000010

Thread 0 Crashed:
0   birdfeeder                    0x0000000104a21f6c feed + 44

Thread 0 crashed with X86 Thread State:
  rax: 0x0000000000000010  rbx: 0x0000000000000000  rcx: 0x00007ffee9b21a40  rdx: 0x00007ffee9b219c8
  rip: 0x0000000104a21f6c

Binary Images:
       0x104a20000 -        0x104a23fff +birdfeeder x86_64  <3e9d1b7a55c24f0e9a61b8c4d2f07e15> /Users/dev/birdfeeder
";

    #[test]
    fn metadata_and_images_are_mapped_as_upstream_does() {
        let ParsedReport {
            modules,
            stacktraces,
            metadata,
        } = parse(REPORT.as_bytes()).unwrap();
        assert_eq!(modules.len(), 1);
        let raw = &modules[0].raw;
        assert_eq!(raw.ty, ObjectType::Macho);
        assert_eq!(
            raw.debug_id.as_deref(),
            Some("3e9d1b7a-55c2-4f0e-9a61-b8c4d2f07e15")
        );
        assert_eq!(
            raw.code_id.as_deref(),
            Some("3e9d1b7a55c24f0e9a61b8c4d2f07e15")
        );
        assert_eq!(raw.image_addr, HexValue(0x104a20000));
        assert_eq!(stacktraces.len(), 1);
        assert_eq!(stacktraces[0].is_requesting, Some(true));
        assert_eq!(
            stacktraces[0].frames[0].instruction_addr,
            HexValue(0x104a21f6c)
        );
        assert_eq!(stacktraces[0].registers["rip"], HexValue(0x104a21f6c));

        let mut response = CompletedSymbolicationResponse::default();
        metadata.merge_into(&mut response);
        let info = response.system_info.unwrap();
        assert_eq!(info.os_name, "macOS");
        assert_eq!(info.os_version, "10.15.5");
        assert_eq!(info.os_build, "19F101");
        assert_eq!(info.device_model, "Macmini8,1");
        assert_eq!(info.cpu_arch, Arch::Amd64);
        assert_eq!(
            response.crash_reason.as_deref(),
            Some("EXC_BAD_ACCESS (SIGBUS)")
        );
        assert_eq!(
            response.crash_details.as_deref(),
            Some("KERN_PROTECTION_FAILURE at 0x0000000000000010")
        );
        assert_eq!(response.crashed, Some(true));
        assert!(response.timestamp.is_some());
    }
}
