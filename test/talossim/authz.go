package talossim

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// errNotAuthorized is the exact error Talos's authorizer returns when no role allows a call.
var errNotAuthorized = status.Error(codes.PermissionDenied, "not authorized")

var (
	adminOnly       = role.MakeSet(role.Admin)
	adminOperator   = role.MakeSet(role.Admin, role.Operator)
	readers         = role.MakeSet(role.Admin, role.Operator, role.Reader)
	etcdReaders     = role.MakeSet(role.Admin, role.Operator, role.Reader, role.EtcdBackup)
	adminOrReader   = role.MakeSet(role.Admin, role.Reader) // the reader part is maintenance-only, checked in the handler
	adminMetaWriter = role.MakeSet(role.Admin, role.MetaWriter)
)

// fallbackRoles are the roles allowed to call a method missing from rules (machined uses admin).
var fallbackRoles = adminOnly

// rules mirrors machined's per-method role table in Talos v1.13.0.
var rules = map[string]role.Set{
	"/cluster.ClusterService/HealthCheck": readers,

	"/inspect.InspectService/ControllerRuntimeDependencies": readers,

	"/machine.ImageService/Import": adminOnly,
	"/machine.ImageService/List":   readers,
	"/machine.ImageService/Pull":   adminOperator,
	"/machine.ImageService/Remove": adminOnly,
	"/machine.ImageService/Verify": role.MakeSet(role.Admin, role.Operator, role.Reader, role.ImageVerifier),

	"/machine.DebugService/ContainerRun": adminOnly,

	"/machine.LifecycleService/Install": adminOnly,
	"/machine.LifecycleService/Upgrade": adminOnly,

	"/machine.MachineService/ApplyConfiguration":          adminOrReader,
	"/machine.MachineService/Bootstrap":                   adminOnly,
	"/machine.MachineService/CPUInfo":                     readers,
	"/machine.MachineService/CPUFreqStats":                readers,
	"/machine.MachineService/Containers":                  readers,
	"/machine.MachineService/Copy":                        adminOnly,
	"/machine.MachineService/DiskStats":                   readers,
	"/machine.MachineService/DiskUsage":                   readers,
	"/machine.MachineService/Dmesg":                       readers,
	"/machine.MachineService/EtcdAlarmList":               etcdReaders,
	"/machine.MachineService/EtcdAlarmDisarm":             adminOperator,
	"/machine.MachineService/EtcdDefragment":              adminOperator,
	"/machine.MachineService/EtcdForfeitLeadership":       adminOnly,
	"/machine.MachineService/EtcdLeaveCluster":            adminOnly,
	"/machine.MachineService/EtcdMemberList":              etcdReaders,
	"/machine.MachineService/EtcdRecover":                 adminOnly,
	"/machine.MachineService/EtcdRemoveMemberByID":        adminOnly,
	"/machine.MachineService/EtcdSnapshot":                role.MakeSet(role.Admin, role.Operator, role.EtcdBackup),
	"/machine.MachineService/EtcdStatus":                  etcdReaders,
	"/machine.MachineService/EtcdDowngradeCancel":         adminOnly,
	"/machine.MachineService/EtcdDowngradeEnable":         adminOnly,
	"/machine.MachineService/EtcdDowngradeValidate":       adminOnly,
	"/machine.MachineService/Events":                      readers,
	"/machine.MachineService/GenerateClientConfiguration": adminOnly,
	"/machine.MachineService/Hostname":                    readers,
	"/machine.MachineService/ImageList":                   readers,
	"/machine.MachineService/ImagePull":                   adminOperator,
	"/machine.MachineService/Kubeconfig":                  adminOnly,
	"/machine.MachineService/List":                        readers,
	"/machine.MachineService/LoadAvg":                     readers,
	"/machine.MachineService/Logs":                        readers,
	"/machine.MachineService/LogsContainers":              readers,
	"/machine.MachineService/Memory":                      readers,
	"/machine.MachineService/MetaWrite":                   adminMetaWriter,
	"/machine.MachineService/MetaDelete":                  adminMetaWriter,
	"/machine.MachineService/Mounts":                      readers,
	"/machine.MachineService/NetworkDeviceStats":          readers,
	"/machine.MachineService/Netstat":                     readers,
	"/machine.MachineService/PacketCapture":               adminOperator,
	"/machine.MachineService/Processes":                   readers,
	"/machine.MachineService/Read":                        adminOnly,
	"/machine.MachineService/Reboot":                      adminOperator,
	"/machine.MachineService/Reset":                       adminOnly,
	"/machine.MachineService/Restart":                     adminOperator,
	"/machine.MachineService/Rollback":                    adminOnly,
	"/machine.MachineService/ServiceList":                 readers,
	"/machine.MachineService/ServiceRestart":              adminOperator,
	"/machine.MachineService/ServiceStart":                adminOperator,
	"/machine.MachineService/ServiceStop":                 adminOperator,
	"/machine.MachineService/Shutdown":                    adminOperator,
	"/machine.MachineService/Stats":                       readers,
	"/machine.MachineService/SystemStat":                  readers,
	"/machine.MachineService/Upgrade":                     adminOnly,
	"/machine.MachineService/Version":                     readers,

	// per-type sensitivity is enforced by the COSI access policy (state.go)
	"/cosi.resource.State/Create":  adminOnly,
	"/cosi.resource.State/Destroy": adminOnly,
	"/cosi.resource.State/Get":     readers,
	"/cosi.resource.State/List":    readers,
	"/cosi.resource.State/Update":  adminOnly,
	"/cosi.resource.State/Watch":   readers,

	"/storage.StorageService/Disks":           readers,
	"/storage.StorageService/BlockDeviceWipe": adminOrReader,

	"/time.TimeService/Time":      readers,
	"/time.TimeService/TimeCheck": readers,
}

// rolesKey is the context key under which the caller's roles are stored for handlers.
type rolesKey struct{}

// contextWithRoles attaches the caller's roles to ctx.
func contextWithRoles(ctx context.Context, roles role.Set) context.Context {
	return context.WithValue(ctx, rolesKey{}, roles)
}

// rolesFromContext returns the caller's roles; role.Zero if the interceptor did not run.
func rolesFromContext(ctx context.Context) role.Set {
	roles, ok := ctx.Value(rolesKey{}).(role.Set)
	if !ok {
		return role.Zero
	}

	return roles
}

// extractRoles computes the caller's roles the way apid does: reader in maintenance mode, otherwise the
// client certificate's Organization, replaced by talos-role metadata for os:impersonator callers.
func extractRoles(ctx context.Context, maintenance bool) role.Set {
	if maintenance {
		return role.MakeSet(role.Reader)
	}

	p, ok := peer.FromContext(ctx)
	if !ok {
		return role.Zero
	}

	tlsInfo, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(tlsInfo.State.PeerCertificates) == 0 {
		return role.Zero
	}

	roles, _ := role.Parse(tlsInfo.State.PeerCertificates[0].Subject.Organization)

	if roles.Includes(role.Impersonator) {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if vals := md.Get(constants.APIAuthzRoleMetadataKey); len(vals) > 0 {
				mdRoles, _ := role.Parse(vals)

				return mdRoles
			}
		}
	}

	return roles
}

// authorize checks roles against the rules table, returning errNotAuthorized on denial.
func authorize(method string, roles role.Set) error {
	allowed, ok := rules[method]
	if !ok {
		allowed = fallbackRoles
	}

	if !allowed.IncludesAny(roles) {
		return errNotAuthorized
	}

	return nil
}

// errAPIDown is what a call gets when it reaches an API instance that is shutting down (node rebooting
// or switching out of maintenance mode); a real node's clients see Unavailable then, too.
var errAPIDown = status.Error(codes.Unavailable, "talos API is restarting")

// unaryInterceptor applies call faults, injects roles and enforces the rules table for unary calls on one
// API instance.
func (a *apiServer) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if a.retired.Load() {
		return nil, errAPIDown
	}

	if err := a.node.callFaults(ctx, a, info.FullMethod); err != nil {
		return nil, err
	}

	roles := extractRoles(ctx, a.maintenance)
	if err := authorize(info.FullMethod, roles); err != nil {
		return nil, err
	}

	return handler(contextWithRoles(ctx, roles), req)
}

// streamInterceptor applies call faults, injects roles and enforces the rules table for streaming calls on
// one API instance.
func (a *apiServer) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if a.retired.Load() {
		return errAPIDown
	}

	if err := a.node.callFaults(ss.Context(), a, info.FullMethod); err != nil {
		return err
	}

	roles := extractRoles(ss.Context(), a.maintenance)
	if err := authorize(info.FullMethod, roles); err != nil {
		return err
	}

	return handler(srv, &rolesStream{ServerStream: ss, ctx: contextWithRoles(ss.Context(), roles)})
}

// rolesStream overrides a server stream's context so stream handlers (COSI List/Watch) see the roles.
type rolesStream struct {
	grpc.ServerStream

	ctx context.Context //nolint:containedctx
}

// Context returns the stream context carrying the caller's roles.
func (s *rolesStream) Context() context.Context {
	return s.ctx
}
