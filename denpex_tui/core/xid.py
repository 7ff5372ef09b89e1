"""NVIDIA Xid codes: what the driver's ``NVRM: Xid (PCI:...): N, ...`` line means and what to do.

Data from NVIDIA's published Xid catalog ("Analyzing Xid Errors with the Xid Catalog",
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html: mnemonic, description and
its *resolution buckets* — the immediate action RESTART_APP, RESET_GPU, RESTART_BM (reboot the
node), CONTACT_SUPPORT (RMA)), with NVIDIA's dynamic page retirement guide
(https://docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html: 48, 63, 64) and NVIDIA's
health-validation checks (https://docs.nvidia.com/health-validation/reference/checks/xid.md: 46,
48: drain, reset the GPU, service). Only codes whose meaning those pages state are listed; any
other code is reported as "see the catalog", never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["XidInfo", "XIDS", "xid_info", "xid_evidence", "CATALOG_URL"]

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


@dataclass(frozen=True)
class XidInfo:
    code: int
    meaning: str
    action: str  # what to do, in the catalog's terms
    hardware: bool  # points at the GPU/node rather than the application


XIDS: dict[int, XidInfo] = {x.code: x for x in (
    XidInfo(8, "GPU stopped processing (ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT)", "restart the application (RESTART_APP)", False),
    XidInfo(13, "graphics engine exception: an application fault (illegal memory access, out-of-range index, illegal instruction)",
            "restart the application; if it follows the job to other nodes it is the code", False),
    XidInfo(43, "GPU stopped processing after a software-induced fault; the channel was reset",
            "restart the application", False),
    XidInfo(46, "GPU stopped processing", "drain the node, reset the GPU; if it recurs, service the GPU", True),
    XidInfo(48, "double-bit (uncorrectable) ECC error in GPU memory", "drain the node, reset the GPU (pages are retired on reset); "
            "if it recurs, RMA", True),
    XidInfo(63, "a memory row or page was marked for remapping/retirement", "reset the GPU to activate the remapping", True),
    XidInfo(64, "row remapping / page retirement failed", "drain the node and contact support (RMA)", True),
    XidInfo(79, "GPU has fallen off the bus (it no longer answers on PCIe: power, heat, riser or board)",
            "drain the node and reboot it; check power, cooling and seating; if it recurs, RMA", True),
    XidInfo(119, "GSP RPC timeout", "reset the GPU, or reboot the node (RESTART_BM)", True),
    XidInfo(120, "GSP error", "reset the GPU, or reboot the node (RESTART_BM)", True),
)}


def xid_info(code: int | str | None) -> XidInfo | None:
    try:
        return XIDS.get(int(code)) if code is not None else None
    except (TypeError, ValueError):
        return None


def xid_evidence(fields: dict) -> str | None:
    """One evidence line for a finding whose detector read an Xid (``xid``, ``pci_bus``)."""
    code = fields.get("xid")
    if code is None:
        return None
    where = f" on GPU {fields['pci_bus']}" if fields.get("pci_bus") else ""
    info = xid_info(code)
    if info is None:
        return f"Xid {code}{where}: not among the codes Denpex knows; look it up in NVIDIA's Xid catalog ({CATALOG_URL})"
    kind = "hardware or driver: drain the node" if info.hardware else "often the application"
    return (f"Xid {code}{where}: {info.meaning} ({kind}); action per NVIDIA's Xid catalog: {info.action} "
            f"({CATALOG_URL})")
