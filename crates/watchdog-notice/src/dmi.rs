//! Which cloud a VM is on, from the DMI (SMBIOS) strings the kernel shows under
//! `/sys/class/dmi/id` (<https://www.kernel.org/doc/Documentation/ABI/testing/sysfs-class-dmi>,
//! world-readable for these three files). Read through `watchdog-procfs` (the one reader of
//! the kernel's files) under a root, so tests use fixture trees.
//!
//! The values, each from the provider's documentation:
//! - GCE: `product_name` is `Google Compute Engine` ("Detect if a VM is running in Compute
//!   Engine", cloud.google.com/compute/docs/instances/detect-compute-engine).
//! - AWS: `sys_vendor` is `Amazon EC2` on Nitro instances ("Detect whether a host is an EC2
//!   instance", docs.aws.amazon.com/AWSEC2/latest/UserGuide/identify_ec2_instances.html).
//!   Older Xen instances show `Xen` there and are not detected: name `aws` in the config.
//! - Azure: `chassis_asset_tag` is `7783-7084-3265-9085-8269-3286-77` (ASCII for
//!   "MSFT AZURE VM"; Microsoft's Azure Linux agent and cloud-init's `DataSourceAzure`
//!   identify Azure by it). A Hyper-V VM elsewhere has another tag.

use std::path::Path;

use watchdog_procfs::roots::DMI_ID_DIR;

/// `product_name` on GCE.
pub const GCE_PRODUCT_NAME: &str = "Google Compute Engine";
/// `sys_vendor` on AWS (Nitro).
pub const AWS_SYS_VENDOR: &str = "Amazon EC2";
/// `chassis_asset_tag` on Azure.
pub const AZURE_CHASSIS_ASSET_TAG: &str = "7783-7084-3265-9085-8269-3286-77";

/// A cloud whose metadata server announces a VM's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Provider {
    /// Google Compute Engine.
    Gce,
    /// Amazon EC2.
    Aws,
    /// Microsoft Azure.
    Azure,
}

impl Provider {
    /// Every provider, in the order [`detect`] checks them.
    pub const ALL: [Provider; 3] = [Provider::Gce, Provider::Aws, Provider::Azure];

    /// The provider's name as the config and the `notice` event's `source` spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Gce => "gce",
            Provider::Aws => "aws",
            Provider::Azure => "azure",
        }
    }

    /// The metadata server's base URL: the link-local address for all three (see the crate
    /// documentation for why GCE's is not `metadata.google.internal`).
    pub fn default_base_url(self) -> &'static str {
        "http://169.254.169.254"
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The provider named by the DMI strings under `<dmi_root>/sys/class/dmi/id`, if any.
/// A missing or unreadable file counts as empty: a machine without DMI is no provider's.
pub fn detect(dmi_root: &Path) -> Option<Provider> {
    let dir = dmi_root.join(DMI_ID_DIR);
    // An unreadable file reads as empty: it names no provider.
    let read = |name: &str| watchdog_procfs::dmi_string(&dir, name);
    detect_from(
        &read("product_name"),
        &read("sys_vendor"),
        &read("chassis_asset_tag"),
    )
}

/// The provider named by these DMI strings (surrounding whitespace ignored).
pub fn detect_from(
    product_name: &str,
    sys_vendor: &str,
    chassis_asset_tag: &str,
) -> Option<Provider> {
    if product_name.trim() == GCE_PRODUCT_NAME {
        Some(Provider::Gce)
    } else if sys_vendor.trim() == AWS_SYS_VENDOR {
        Some(Provider::Aws)
    } else if chassis_asset_tag.trim() == AZURE_CHASSIS_ASSET_TAG {
        Some(Provider::Azure)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_strings_name_their_provider() {
        let table = [
            (
                "Google Compute Engine\n",
                "Google\n",
                "\n",
                Some(Provider::Gce),
            ),
            (
                "m5.large\n",
                "Amazon EC2\n",
                "Amazon EC2\n",
                Some(Provider::Aws),
            ),
            (
                "Virtual Machine\n",
                "Microsoft Corporation\n",
                "7783-7084-3265-9085-8269-3286-77\n",
                Some(Provider::Azure),
            ),
            // Hyper-V outside Azure: same vendor and product, another tag.
            ("Virtual Machine", "Microsoft Corporation", "None", None),
            // Xen-era EC2 does not say Amazon EC2.
            ("HVM domU", "Xen", "", None),
            ("Standard PC (Q35 + ICH9, 2009)", "QEMU", "", None),
            ("", "", "", None),
            // Close is not enough.
            (
                "Google Compute Engine Plus",
                "Amazon EC2 Clone",
                "7783",
                None,
            ),
        ];
        for (product, vendor, tag, want) in table {
            assert_eq!(
                detect_from(product, vendor, tag),
                want,
                "{product:?} {vendor:?} {tag:?}"
            );
        }
    }

    #[test]
    fn a_root_without_dmi_is_no_provider() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(detect(dir.path()), None);
        assert_eq!(detect(&dir.path().join("absent")), None);
    }
}
