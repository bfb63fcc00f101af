// Package cloudprovider is Karpenter's cloud provider for the local cluster: the shape of
// Karpenter's own kwok/cloudprovider (instance types from JSON, the KWOKNodeClass kind),
// except that an instance is a real node (upstream kubelet and containerd in a network
// namespace of its own) that registers itself, as a cloud instance's kubelet does, instead
// of a Node object the provider writes. The node's lifecycle stays with the localcluster
// package in Python (`python -m localcluster nodeclaim ...`, see localnodes.go).
package cloudprovider

import (
	"context"
	stderrors "errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/awslabs/operatorpkg/status"
	"github.com/samber/lo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/scheduling"
)

const (
	// ProviderIDPrefix marks the nodes this provider runs: localcluster://<NodeClaim name>.
	ProviderIDPrefix = "localcluster://"
	// RepairTolerationEnv: how long a node may be NotReady before Karpenter replaces it
	// (node repair, FEATURE_GATES=NodeRepair=true); kwok's 10 minutes by default.
	RepairTolerationEnv     = "LOCALCLUSTER_REPAIR_TOLERATION"
	defaultRepairToleration = 10 * time.Minute
)

type CloudProvider struct {
	kubeClient    client.Client
	instanceTypes []*InstanceType
	nodes         Nodes
}

// Nodes starts, stops and lists the real nodes behind NodeClaims (LocalNodes; a fake in tests).
type Nodes interface {
	Launch(ctx context.Context, launch Launch) (*Instance, error)
	Delete(ctx context.Context, name string) error
	List(ctx context.Context) ([]*Instance, error)
}

func New(kubeClient client.Client, instanceTypes []*InstanceType, nodes Nodes) *CloudProvider {
	return &CloudProvider{kubeClient: kubeClient, instanceTypes: instanceTypes, nodes: nodes}
}

// Create picks the cheapest available offering of the NodeClaim's instance types (as kwok
// does) and starts a node of that type named for the NodeClaim. It returns at once: the
// node boots (after the node class's nodeRegistrationDelay, else the instance type's
// bootDelay) and registers on its own, as a cloud instance does.
func (c *CloudProvider) Create(ctx context.Context, nodeClaim *v1.NodeClaim) (*v1.NodeClaim, error) {
	nodeClass, err := c.resolveNodeClass(ctx, nodeClaim)
	if err != nil {
		if errors.IsNotFound(err) {
			return nil, cloudprovider.NewInsufficientCapacityError(fmt.Errorf("resolving node class from nodeclaim, %w", err))
		}
		return nil, fmt.Errorf("resolving node class from nodeclaim, %w", err)
	}
	if ready := nodeClass.StatusConditions().Get(status.ConditionReady); ready.IsFalse() {
		return nil, cloudprovider.NewNodeClassNotReadyError(stderrors.New(ready.Message))
	}
	instanceType, offering, err := c.cheapestOffering(nodeClaim)
	if err != nil {
		return nil, err
	}
	bootDelay := instanceType.BootDelay
	if nodeClass.Spec.NodeRegistrationDelay.Duration > 0 {
		bootDelay = nodeClass.Spec.NodeRegistrationDelay.Duration
	}
	overhead := instanceType.Overhead
	instance, err := c.nodes.Launch(ctx, Launch{
		Name:              nodeClaim.Name,
		ProviderID:        ProviderIDPrefix + nodeClaim.Name,
		InstanceType:      instanceType.Name,
		Labels:            instanceLabels(nodeClaim, instanceType.InstanceType, offering),
		Taints:            registrationTaints(nodeClaim),
		Capacity:          instanceType.Capacity,
		Allocatable:       instanceType.Allocatable(),
		KubeReserved:      overhead.KubeReserved,
		SystemReserved:    overhead.SystemReserved,
		EvictionThreshold: overhead.EvictionThreshold,
		BootDelaySeconds:  bootDelay.Seconds(),
	})
	if err != nil {
		return nil, fmt.Errorf("launching a local node, %w", err)
	}
	created := toNodeClaim(instance)
	created.Status.NodeName = "" // known once the kubelet registers
	return created, nil
}

// Delete stops the node (its daemons, containers, network namespace and cgroups) and
// deletes its Node; the instance is then gone, which is what Karpenter waits for.
func (c *CloudProvider) Delete(ctx context.Context, nodeClaim *v1.NodeClaim) error {
	name := nodeClaim.Name
	if nodeClaim.Status.ProviderID != "" {
		name = strings.TrimPrefix(nodeClaim.Status.ProviderID, ProviderIDPrefix)
	}
	if err := c.nodes.Delete(ctx, name); err != nil {
		return fmt.Errorf("deleting local node %s, %w", name, err)
	}
	return cloudprovider.NewNodeClaimNotFoundError(fmt.Errorf("instance %s terminated", name))
}

func (c *CloudProvider) Get(ctx context.Context, providerID string) (*v1.NodeClaim, error) {
	instances, err := c.nodes.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing local nodes, %w", err)
	}
	instance, found := lo.Find(instances, func(i *Instance) bool { return i.ProviderID == providerID })
	if !found {
		return nil, cloudprovider.NewNodeClaimNotFoundError(fmt.Errorf("no local node has provider ID %s", providerID))
	}
	return toNodeClaim(instance), nil
}

func (c *CloudProvider) List(ctx context.Context) ([]*v1.NodeClaim, error) {
	instances, err := c.nodes.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing local nodes, %w", err)
	}
	return lo.Map(instances, func(i *Instance, _ int) *v1.NodeClaim { return toNodeClaim(i) }), nil
}

func (c *CloudProvider) GetInstanceTypes(_ context.Context, _ *v1.NodePool) ([]*cloudprovider.InstanceType, error) {
	return lo.Map(c.instanceTypes, func(it *InstanceType, _ int) *cloudprovider.InstanceType { return it.InstanceType }), nil
}

// IsDrifted: a local node never drifts from its cloud's side.
func (c *CloudProvider) IsDrifted(context.Context, *v1.NodeClaim) (cloudprovider.DriftReason, error) {
	return "", nil
}

func (c *CloudProvider) Name() string {
	return "localcluster"
}

func (c *CloudProvider) GetSupportedNodeClasses() []status.Object {
	return []status.Object{&v1alpha1.KWOKNodeClass{}}
}

// RepairPolicies: a node whose kubelet reports NotReady, or stops reporting, for the
// toleration is replaced (as kwok's, whose toleration is 10 minutes).
func (c *CloudProvider) RepairPolicies() []cloudprovider.RepairPolicy {
	toleration := defaultRepairToleration
	if text := os.Getenv(RepairTolerationEnv); text != "" {
		if parsed, err := time.ParseDuration(text); err == nil {
			toleration = parsed
		}
	}
	return []cloudprovider.RepairPolicy{
		{ConditionType: corev1.NodeReady, ConditionStatus: corev1.ConditionFalse, TolerationDuration: toleration},
		{ConditionType: corev1.NodeReady, ConditionStatus: corev1.ConditionUnknown, TolerationDuration: toleration},
	}
}

func (c *CloudProvider) resolveNodeClass(ctx context.Context, nodeClaim *v1.NodeClaim) (*v1alpha1.KWOKNodeClass, error) {
	nodeClass := &v1alpha1.KWOKNodeClass{}
	if err := c.kubeClient.Get(ctx, types.NamespacedName{Name: nodeClaim.Spec.NodeClassRef.Name}, nodeClass); err != nil {
		return nil, err
	}
	return nodeClass, nil
}

// cheapestOffering is kwok's choice: over the NodeClaim's instance types (its requirement
// on the instance-type label, always In), the cheapest available compatible offering.
func (c *CloudProvider) cheapestOffering(nodeClaim *v1.NodeClaim) (*InstanceType, *cloudprovider.Offering, error) {
	requirements := scheduling.NewNodeSelectorRequirementsWithMinValues(nodeClaim.Spec.Requirements...)
	req, found := lo.Find(nodeClaim.Spec.Requirements, func(req v1.NodeSelectorRequirementWithMinValues) bool {
		return req.Key == corev1.LabelInstanceTypeStable
	})
	if !found {
		return nil, nil, fmt.Errorf("instance type requirement not found")
	}
	var chosen *InstanceType
	var cheapest *cloudprovider.Offering
	for _, name := range req.Values {
		it, found := lo.Find(c.instanceTypes, func(it *InstanceType) bool { return it.Name == name })
		if !found {
			return nil, nil, fmt.Errorf("instance type %s not found", name)
		}
		offerings := it.Offerings.Available().Compatible(requirements)
		if len(offerings) == 0 {
			continue
		}
		byPrice := lo.GroupBy(offerings, func(of *cloudprovider.Offering) float64 { return of.Price })
		minPrice := lo.Min(lo.Keys(byPrice))
		if cheapest == nil || minPrice < cheapest.Price {
			cheapest = lo.Sample(byPrice[minPrice])
			chosen = it
		}
	}
	if chosen == nil {
		return nil, nil, cloudprovider.NewInsufficientCapacityError(fmt.Errorf("no available offering of %v fits the nodeclaim", req.Values))
	}
	return chosen, cheapest, nil
}

// instanceLabels are kwok's: the NodeClaim's labels, its single-valued requirements, the
// instance type's and the offering's; and the hostname, the NodeClaim's name (the node's).
func instanceLabels(nodeClaim *v1.NodeClaim, instanceType *cloudprovider.InstanceType, offering *cloudprovider.Offering) map[string]string {
	labels := lo.Assign(nodeClaim.Labels)
	for _, r := range nodeClaim.Spec.Requirements {
		if len(r.Values) == 1 && r.Operator == corev1.NodeSelectorOpIn {
			labels[r.Key] = r.Values[0]
		}
	}
	labels[corev1.LabelInstanceTypeStable] = instanceType.Name
	for _, requirements := range []scheduling.Requirements{instanceType.Requirements, offering.Requirements} {
		for _, r := range requirements {
			if r.Len() == 1 && r.Operator() == corev1.NodeSelectorOpIn {
				labels[r.Key] = r.Values()[0]
			}
		}
	}
	labels[corev1.LabelHostname] = nodeClaim.Name
	return labels
}

// registrationTaints are what the kubelet registers with, as a cloud provider's node
// bootstrap passes them: Karpenter's unregistered taint (it lifts it once it has synced the
// NodeClaim onto the Node), the NodeClaim's taints and its startup taints.
func registrationTaints(nodeClaim *v1.NodeClaim) []corev1.Taint {
	taints := []corev1.Taint{v1.UnregisteredNoExecuteTaint}
	taints = append(taints, nodeClaim.Spec.Taints...)
	return append(taints, nodeClaim.Spec.StartupTaints...)
}

func toNodeClaim(instance *Instance) *v1.NodeClaim {
	return &v1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:              instance.Name,
			Labels:            instance.Labels,
			CreationTimestamp: metav1.NewTime(instance.LaunchedAt),
		},
		Status: v1.NodeClaimStatus{
			NodeName:    instance.Name,
			ProviderID:  instance.ProviderID,
			Capacity:    instance.Capacity,
			Allocatable: instance.Allocatable,
		},
	}
}
