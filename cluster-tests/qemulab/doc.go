// Package qemulab runs the QEMU cluster lab: aluad on the host, in a
// network namespace the lab creates, with its portals on two lab fabrics,
// and Debian guests (bullseye to sid, bookworm by default) whose real
// Linux multipath stacks (open-iscsi + dm-multipath + scsi_dh_alua, or
// QEMU's own libiscsi driver under scsi-block) reach those portals.
//
// It owns: building the guest images (build-image.sh, cached per
// release) and the small initrd (initrd.go), the lab network (net.go),
// guest processes and the agent protocol (vm.go), the aluad process
// (array.go), parsing what the guest tools print (parse.go), and the
// scenarios with their measurements (scenario.go, measure.go,
// results.go). The measurements are taken at the array: when each host
// was told of a move (its first 2A/06), and when its READs and WRITEs
// stopped arriving at the old owner and started arriving at the new one
// (GET /v1/io, polled every 10 ms).
package qemulab
