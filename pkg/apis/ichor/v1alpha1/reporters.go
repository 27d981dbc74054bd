package v1alpha1

// The reporting controllers of Ichor's Events (an Event's
// reportingController, core/v1's reportingComponent): whoever reads Ichor's
// Events can tell them from Events others wrote about Ichor's objects.
const (
	// ReporterController is ichor-controller's.
	ReporterController = "ichor-controller"
	// ReporterAPIServer is ichor-apiserver's (actions and downloads).
	ReporterAPIServer = "ichor-apiserver"
)

// Reporters are Ichor's reporting controllers.
var Reporters = []string{ReporterController, ReporterAPIServer}
