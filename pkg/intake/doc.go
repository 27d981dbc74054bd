// Package intake is what ichor-controller knows about taking a machine in:
// contacting its maintenance-mode API, pinning the certificate it presents
// on first contact, recording its hardware facts, and saying so in the
// TalosMachine's status with conditions and a phase. It is shared by the
// TalosMachine reconciler and the provisioning-network scanner, and all of
// it but Contact and InMaintenance is pure.
package intake
