"""PCIe: :mod:`~models.pcie.link` (a link and its FIFO directions), :mod:`~models.pcie.closed_form` (the
pcie-model formulas), :mod:`~models.pcie.tlp` (the TLP-by-TLP model), :mod:`~models.pcie.topology` (switches,
root complex, sockets), :mod:`~models.pcie.iommu` (IOMMU translation), :mod:`~models.pcie.presets` (link presets)."""
