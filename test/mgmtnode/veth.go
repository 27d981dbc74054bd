package mgmtnode

import (
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The node's pod network lives in network namespaces the node creates: its
// own (the node namespace) and one per pod, joined by a veth pair each, as
// a CNI plugin joins pods to a node. Pod IPs come from the node's pod CIDR;
// the node side of every pair has the gateway address. Services and
// exposed host addresses are loopback addresses on the host; inside a pod
// they are routed to the node namespace (route_localnet lets loopback
// addresses cross the veth), where the node listens on them and forwards
// (proxy.go). A pod's own ports never collide with a Service's.

// podCIDR is every node's pod network: it exists only inside the node's
// namespaces.
var podCIDR = netip.MustParsePrefix("10.244.0.0/24")

// gateway is the node side's address on every veth.
var gateway = podCIDR.Addr().Next()

// enableRouteLocalnet lets the current namespace route loopback addresses
// over other interfaces.
func enableRouteLocalnet() error {
	return os.WriteFile("/proc/sys/net/ipv4/conf/all/route_localnet", []byte("1"), 0o644)
}

// plug joins the pod's namespace to the node's with a veth pair, gives the
// pod ip, and routes to the node namespace what pods reach there.
func (n *Node) plug(podNetns string, index int, ip netip.Addr, routed []netip.Prefix) error {
	nodeNS, err := netns.GetFromPath(n.netns)
	if err != nil {
		return err
	}
	defer nodeNS.Close() //nolint:errcheck
	podNS, err := netns.GetFromPath(podNetns)
	if err != nil {
		return err
	}
	defer podNS.Close() //nolint:errcheck
	onNode, err := netlink.NewHandleAt(nodeNS)
	if err != nil {
		return err
	}
	defer onNode.Close()
	inPod, err := netlink.NewHandleAt(podNS)
	if err != nil {
		return err
	}
	defer inPod.Close()

	name := fmt.Sprintf("veth%d", index)
	_ = onNode.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}})
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(podNS))}
	if err := onNode.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth %s: %w", name, err)
	}
	host, err := onNode.LinkByName(name)
	if err != nil {
		return err
	}
	pod, err := inPod.LinkByName("eth0")
	if err != nil {
		return err
	}
	if err := onNode.AddrAdd(host, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(gateway, 32))}); err != nil {
		return err
	}
	if err := inPod.AddrAdd(pod, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(ip, 32))}); err != nil {
		return err
	}
	for _, l := range []struct {
		h    *netlink.Handle
		link netlink.Link
	}{{onNode, host}, {inPod, pod}} {
		if err := l.h.LinkSetUp(l.link); err != nil {
			return err
		}
	}
	if err := onNode.RouteAdd(&netlink.Route{LinkIndex: host.Attrs().Index, Dst: ipNet(netip.PrefixFrom(ip, 32)), Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("route to the pod: %w", err)
	}
	if err := inPod.RouteAdd(&netlink.Route{LinkIndex: pod.Attrs().Index, Dst: ipNet(netip.PrefixFrom(gateway, 32)), Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("route to the gateway: %w", err)
	}
	if err := inPod.RouteAdd(&netlink.Route{LinkIndex: pod.Attrs().Index, Dst: ipNet(podCIDR), Gw: gateway.AsSlice(), Src: ip.AsSlice()}); err != nil {
		return fmt.Errorf("route to the pod network: %w", err)
	}
	for _, p := range routed {
		if err := routeToNode(inPod, pod, ip, p); err != nil {
			return err
		}
	}
	return nil
}

// routeToNode routes prefix, loopback addresses, from a pod to the node
// namespace: in the local table, where the more specific route wins over
// loopback's 127.0.0.0/8.
func routeToNode(inPod *netlink.Handle, pod netlink.Link, ip netip.Addr, prefix netip.Prefix) error {
	err := inPod.RouteReplace(&netlink.Route{LinkIndex: pod.Attrs().Index, Dst: ipNet(prefix), Gw: gateway.AsSlice(), Src: ip.AsSlice(),
		Table: unix.RT_TABLE_LOCAL, Type: unix.RTN_UNICAST})
	if err != nil {
		return fmt.Errorf("route %s to the node: %w", prefix, err)
	}
	return nil
}

// routeInPod adds a route to the node namespace to a running pod.
func routeInPod(podNetns string, ip netip.Addr, prefix netip.Prefix) error {
	podNS, err := netns.GetFromPath(podNetns)
	if err != nil {
		return err
	}
	defer podNS.Close() //nolint:errcheck
	inPod, err := netlink.NewHandleAt(podNS)
	if err != nil {
		return err
	}
	defer inPod.Close()
	pod, err := inPod.LinkByName("eth0")
	if err != nil {
		return err
	}
	return routeToNode(inPod, pod, ip, prefix)
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
