package v1alpha1

// TenantNetworkPolicy is what the pods of a Kubernetes target's tenant
// namespaces may reach beyond their own job's pods and DNS, which is all
// each namespace's default-deny NetworkPolicy lets through. Only an
// administrator sets it: tenants cannot widen their own network.
type TenantNetworkPolicy struct {
	// egress are destinations outside the job every tenant pod on this
	// target may reach, for example an object store, a package mirror or
	// a license server. The agent renders them into the NetworkPolicy
	// trainyard-allow-egress of each tenant namespace, and applies a change
	// at its next job there. Empty: nothing beyond the job and DNS.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Egress []EgressRule `json:"egress,omitempty"`
}

// EgressRule allows traffic to one IP block, on some ports or all of them.
// +kubebuilder:validation:XValidation:rule="!has(self.except) || (isCIDR(self.cidr) && self.except.all(e, isCIDR(e) && cidr(self.cidr).containsCIDR(e) && cidr(e).prefixLength() > cidr(self.cidr).prefixLength()))",message="every except block must be a CIDR strictly inside cidr"
type EgressRule struct {
	// cidr is the destination block, for example 10.20.0.0/16 or
	// 2001:db8::/48 (0.0.0.0/0 allows every IPv4 address).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="cidr must be an IPv4 or IPv6 CIDR such as 10.0.0.0/8"
	CIDR string `json:"cidr"`

	// except are blocks inside cidr that stay denied.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=64
	Except []string `json:"except,omitempty"`

	// ports limit the rule to these destination ports; empty allows every
	// port of every protocol.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Ports []EgressPort `json:"ports,omitempty"`
}

// EgressPort is one destination port, or a range of them.
// +kubebuilder:validation:XValidation:rule="!has(self.endPort) || self.endPort >= self.port",message="endPort must not be below port"
type EgressPort struct {
	// protocol of the port.
	// +optional
	// +kubebuilder:default=TCP
	Protocol EgressProtocol `json:"protocol,omitempty"`

	// port is the destination port, or the first of the range up to endPort.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// endPort, when set, ends the range of ports that starts at port.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	EndPort *int32 `json:"endPort,omitempty"`
}

// EgressProtocol is a NetworkPolicy port's protocol.
// +kubebuilder:validation:Enum=TCP;UDP;SCTP
type EgressProtocol string

const (
	EgressProtocolTCP  EgressProtocol = "TCP"
	EgressProtocolUDP  EgressProtocol = "UDP"
	EgressProtocolSCTP EgressProtocol = "SCTP"
)
