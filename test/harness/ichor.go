package harness

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/klog/v2"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"
	sigsyaml "sigs.k8s.io/yaml"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ichorcmd "ichor.dev/ichor/pkg/cmd/apiserver"

	"ichor.dev/ichor/test/internal/proc"
)

// APIServiceName is the name of Ichor's APIService.
var APIServiceName = v1alpha1.SchemeGroupVersion.Version + "." + v1alpha1.GroupName

// ichorServer is ichor-apiserver, running in this process or as a child.
type ichorServer struct {
	proc   *proc.Process
	cancel context.CancelFunc
	done   chan error
}

// stop shuts ichor-apiserver down gracefully (SIGTERM, or cancelling its
// context) and returns how it ended: nil for a clean exit.
func (s *ichorServer) stop() error {
	if s == nil {
		return nil
	}
	if s.proc != nil {
		return s.proc.Stop(15 * time.Second)
	}
	s.cancel()
	select {
	case err := <-s.done:
		s.done <- err
		return err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("ichor-apiserver still running 30s after its context ended")
	}
}

// installIchorAccess applies what artifacts/ grants ichor-apiserver: its
// namespace, ServiceAccount and RBAC. The harness runs it with a client
// certificate for that ServiceAccount, so the tests prove the artifacts suffice.
func (cp *ControlPlane) installIchorAccess(ctx context.Context) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	args := []string{"apply", "--server-side", "--field-manager=ichor-harness"}
	for _, name := range []string{"namespace.yaml", "serviceaccount.yaml", "apiserver-rbac.yaml", "roles.yaml"} {
		args = append(args, "-f", filepath.Join(root, "artifacts", name))
	}
	if _, err := cp.Kubectl(ctx, args...); err != nil {
		return fmt.Errorf("apply artifacts: %w", err)
	}
	cp.logf("waiting for kube-controller-manager to aggregate the ichor roles")
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, startTimeout, true, func(ctx context.Context) (bool, error) {
		if err := cp.kcm.Exited(); err != nil {
			return false, err
		}
		role, err := cp.kubeClient.RbacV1().ClusterRoles().Get(ctx, "ichor-admin", metav1.GetOptions{})
		return err == nil && len(role.Rules) > 0, nil
	})
	if err != nil {
		return fmt.Errorf("ichor roles not aggregated: %w\n%s", err, cp.kcm.LogTail())
	}
	return nil
}

// ichorArgs are ichor-apiserver's flags, the same whether it runs in this
// process or as a binary, auditing to auditLog.
func (cp *ControlPlane) ichorArgs(port int, auditLog string, opts Options) ([]string, error) {
	f := cp.files
	kubeconfig, err := writeKubeconfig(filepath.Join(cp.Dir, "ichor-apiserver.kubeconfig"), cp.URL, f.kubeCA, f.ichorClientCert, f.ichorClientKey)
	if err != nil {
		return nil, err
	}
	policy, err := writeAuditPolicy(filepath.Join(cp.Dir, "ichor-audit-policy.yaml"))
	if err != nil {
		return nil, err
	}
	args := []string{
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + f.ichorServingCert, "--tls-private-key-file=" + f.ichorServingKey,
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--audit-policy-file=" + policy, "--audit-log-path=" + auditLog,
		// Events are written as they happen, so a test reads them at once.
		"--audit-log-mode=blocking",
		"--controller-upload-url=https://" + cp.ControllerUpload.Address,
		"--controller-upload-ca-file=" + f.controllerCA,
	}
	switch {
	case cp.ha != nil:
		args = append(args, "--etcd-servers="+cp.ha.etcdServers(), "--etcd-cafile="+f.etcdCA,
			"--etcd-certfile="+f.etcdClientCert, "--etcd-keyfile="+f.etcdClientKey)
	case opts.IchorEmbeddedEtcd:
		args = append(args,
			"--embedded-etcd-data-dir="+filepath.Join(cp.Dir, "ichor-etcd"),
			"--embedded-etcd-client-address=127.0.0.1:"+strconv.Itoa(cp.ichorPorts[1]),
			"--embedded-etcd-peer-address=127.0.0.1:"+strconv.Itoa(cp.ichorPorts[2]))
	default:
		args = append(args, "--etcd-servers="+cp.etcdURL, "--etcd-cafile="+f.etcdCA,
			"--etcd-certfile="+f.etcdClientCert, "--etcd-keyfile="+f.etcdClientKey)
	}
	return append(args, opts.IchorArgs...), nil
}

// writeAuditPolicy writes the policy that artifacts/audit-policy.yaml's
// ConfigMap holds to path, as the Deployment mounts it.
func writeAuditPolicy(path string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(filepath.Join(root, "artifacts", "audit-policy.yaml"))
	if err != nil {
		return "", err
	}
	var cm corev1.ConfigMap
	if err := sigsyaml.Unmarshal(data, &cm); err != nil {
		return "", fmt.Errorf("artifacts/audit-policy.yaml: %w", err)
	}
	policy, ok := cm.Data["policy.yaml"]
	if !ok {
		return "", fmt.Errorf("artifacts/audit-policy.yaml has no policy.yaml")
	}
	return path, os.WriteFile(path, []byte(policy), 0o600)
}

func (cp *ControlPlane) startIchor(ctx context.Context, opts Options) error {
	port := cp.ichorPorts[0]
	cp.AuditLog = filepath.Join(cp.Dir, "ichor-audit.log")
	args, err := cp.ichorArgs(port, cp.AuditLog, opts)
	if err != nil {
		return err
	}
	cp.IchorURL = "https://127.0.0.1:" + strconv.Itoa(port)
	client, err := tlsClient(cp.files.ichorCA, "", "")
	if err != nil {
		return err
	}

	if opts.IchorBinary != "" {
		p, err := proc.Start(cp.Dir, "ichor-apiserver", opts.IchorBinary, args...)
		if err != nil {
			return err
		}
		cp.ichor = &ichorServer{proc: p}
		cp.logf("waiting for ichor-apiserver at %s", cp.IchorURL)
		return proc.WaitHealthy(ctx, p, client, cp.IchorURL+"/readyz", startTimeout)
	}

	// In process: parse the same flags the binary would, and log to a file.
	o := ichorcmd.NewOptions()
	fs := pflag.NewFlagSet("ichor-apiserver", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := o.Complete(); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return err
	}
	logPath := filepath.Join(cp.Dir, "ichor-apiserver.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	redirectKlog(logFile)

	runCtx, cancel := context.WithCancel(context.Background())
	s := &ichorServer{cancel: cancel, done: make(chan error, 1)}
	cp.ichor = s
	go func() { s.done <- o.Run(runCtx) }()
	live := &inProcess{logPath: logPath, done: make(chan struct{})}
	go func() {
		err := <-s.done
		live.err = err
		close(live.done)
		s.done <- err
	}()
	cp.logf("waiting for ichor-apiserver at %s", cp.IchorURL)
	return proc.WaitHealthy(ctx, live, client, cp.IchorURL+"/readyz", startTimeout)
}

// registerAPIService points the aggregator at ichor-apiserver. The Service is
// an ExternalName for localhost, because Endpoints may not name loopback
// addresses; the aggregator still verifies ichor-apiserver's certificate
// against the caBundle for the name ichor-apiserver.ichor-system.svc.
func (cp *ControlPlane) registerAPIService(ctx context.Context) error {
	port, err := strconv.Atoi(cp.IchorURL[len("https://127.0.0.1:"):])
	if err != nil {
		return err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ichorServiceName, Namespace: IchorNamespace},
		Spec: corev1.ServiceSpec{
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: "localhost",
			Ports:        []corev1.ServicePort{{Name: "https", Port: int32(port)}},
		},
	}
	if _, err := cp.kubeClient.CoreV1().Services(IchorNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Service %s: %w", ichorServiceName, err)
	}
	agg, err := aggregatorclient.NewForConfig(cp.AdminConfig)
	if err != nil {
		return err
	}
	apiService := &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: APIServiceName},
		Spec: apiregistrationv1.APIServiceSpec{
			Group:                v1alpha1.GroupName,
			Version:              v1alpha1.SchemeGroupVersion.Version,
			Service:              &apiregistrationv1.ServiceReference{Namespace: IchorNamespace, Name: ichorServiceName, Port: ptr.To(int32(port))},
			CABundle:             cp.ichorCA,
			GroupPriorityMinimum: 1000,
			VersionPriority:      15,
		},
	}
	if _, err := agg.ApiregistrationV1().APIServices().Create(ctx, apiService, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create APIService %s: %w", APIServiceName, err)
	}
	cp.logf("waiting for APIService %s to be Available", APIServiceName)
	return cp.waitAPIServiceAvailable(ctx, agg)
}

func (cp *ControlPlane) waitAPIServiceAvailable(ctx context.Context, agg aggregatorclient.Interface) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, startTimeout, true, func(ctx context.Context) (bool, error) {
		svc, err := agg.ApiregistrationV1().APIServices().Get(ctx, APIServiceName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		available := false
		for _, c := range svc.Status.Conditions {
			if c.Type == apiregistrationv1.Available {
				available = c.Status == apiregistrationv1.ConditionTrue
				last = c.Reason + ": " + c.Message
			}
		}
		if !available {
			return false, nil
		}
		// Available means the aggregator reached it. kubectl reads the
		// aggregated discovery document of /apis, which kube-apiserver
		// refreshes on its own schedule: wait until it lists the resources.
		// Another group failing its discovery does not matter here.
		_, lists, err := cp.kubeClient.Discovery().ServerGroupsAndResources()
		if err != nil {
			last = err.Error()
			if !discovery.IsGroupDiscoveryFailedError(err) {
				return false, nil
			}
		}
		for _, l := range lists {
			if l.GroupVersion == v1alpha1.SchemeGroupVersion.String() && len(l.APIResources) > 0 {
				return true, nil
			}
		}
		last = "aggregated discovery does not list " + v1alpha1.SchemeGroupVersion.String() + " yet"
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("APIService %s not available: %v (last: %s)", APIServiceName, err, last)
	}
	return nil
}

// redirectKlog sends this process's klog output, errors included, to w.
func redirectKlog(w io.Writer) {
	flags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(flags)
	_ = flags.Set("logtostderr", "false")
	_ = flags.Set("alsologtostderr", "false")
	_ = flags.Set("stderrthreshold", "FATAL")
	klog.SetOutput(w)
}

// inProcess is ichor-apiserver run in this process, as proc.WaitHealthy watches it.
type inProcess struct {
	logPath string
	done    chan struct{}
	err     error
}

func (p *inProcess) Name() string { return "ichor-apiserver" }

func (p *inProcess) Exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("ichor-apiserver stopped (%v):\n%s", p.err, p.LogTail())
	default:
		return nil
	}
}

func (p *inProcess) LogTail() string {
	data, _ := os.ReadFile(p.logPath)
	return proc.Tail(string(data), 30)
}
