// Package intake is what ichor-controller knows about taking a machine in:
// contacting its maintenance-mode API, pinning the certificate it presents
// on first contact, recording its hardware facts, and saying so in the
// TalosMachine's status with conditions and a phase (WriteStatus, under
// intake's own field manager). The system UUID it records is the machine's
// identity from then on: CheckIdentity tells the machine's node from
// another one answering at its address, and after a node-reset wiped the
// node, Repin pins the certificate it presents anew, only if it is that
// machine. It is shared by the TalosMachine reconciler, the
// provisioning-network scanner, the config reconciler and the operation
// controller; Contact, InMaintenance, CheckIdentity and the status writers
// talk to a node or the API, the rest is pure.
package intake
