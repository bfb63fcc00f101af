package cloudprovider

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	"sigs.k8s.io/karpenter/kwok/options"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
)

const instanceTypesJSON = `[
 {"name": "gpu-8x", "architecture": "amd64", "operatingSystems": ["linux"], "bootDelay": "3m",
  "resources": {"cpu": "2", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "8"},
  "offerings": [{"Price": 8.0, "Available": true, "Requirements": [
   {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
   {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}]},
 {"name": "gpu-4x", "architecture": "amd64", "operatingSystems": ["linux"],
  "resources": {"cpu": "2", "memory": "8Gi", "pods": "110", "nvidia.com/gpu": "4"},
  "offerings": [{"Price": 4.2, "Available": true, "Requirements": [
   {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
   {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}]}
]`

// fakeNodes records launches and deletions instead of starting and stopping nodes.
type fakeNodes struct {
	launched []Launch
	deleted  []string
}

func (f *fakeNodes) Launch(_ context.Context, launch Launch) (*Instance, error) {
	f.launched = append(f.launched, launch)
	return &Instance{Launch: launch, LaunchedAt: time.Unix(0, 0)}, nil
}

func (f *fakeNodes) Delete(_ context.Context, name string) error {
	f.deleted = append(f.deleted, name)
	return nil
}

func (f *fakeNodes) List(context.Context) ([]*Instance, error) {
	instances := []*Instance{}
	for _, launch := range f.launched {
		instances = append(instances, &Instance{Launch: launch})
	}
	return instances, nil
}

func provider(t *testing.T, registrationDelay time.Duration) (*CloudProvider, *fakeNodes) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "instance-types.json")
	if err := os.WriteFile(path, []byte(instanceTypesJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := options.ToContext(context.Background(), &options.Options{InstanceTypesFilePath: path})
	instanceTypes, err := ConstructInstanceTypes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nodeClass := &v1alpha1.KWOKNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: v1alpha1.KWOKNodeClassSpec{NodeRegistrationDelay: metav1.Duration{Duration: registrationDelay}}}
	kubeClient := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nodeClass).Build()
	nodes := &fakeNodes{}
	return New(kubeClient, instanceTypes, nodes), nodes
}

func nodeClaim(instanceTypes ...string) *v1.NodeClaim {
	return &v1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-abcde", Labels: map[string]string{v1.NodePoolLabelKey: "gpu"}},
		Spec: v1.NodeClaimSpec{
			NodeClassRef: &v1.NodeClassReference{Group: "karpenter.kwok.sh", Kind: "KWOKNodeClass", Name: "default"},
			Requirements: []v1.NodeSelectorRequirementWithMinValues{{NodeSelectorRequirement: corev1.NodeSelectorRequirement{
				Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: instanceTypes}}},
			Taints:        []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}},
			StartupTaints: []corev1.Taint{{Key: "example.com/agent-not-ready", Effect: corev1.TaintEffectNoExecute}},
		},
	}
}

func TestCreateLaunchesTheCheapestInstanceTypeNamedForTheNodeClaim(t *testing.T) {
	cloudProvider, nodes := provider(t, 0)
	created, err := cloudProvider.Create(context.Background(), nodeClaim("gpu-8x", "gpu-4x"))
	if err != nil {
		t.Fatal(err)
	}
	launch := nodes.launched[0]
	if launch.Name != "gpu-abcde" || launch.ProviderID != "localcluster://gpu-abcde" || launch.InstanceType != "gpu-4x" {
		t.Errorf("launched %s (%s) of type %s, want gpu-abcde, its provider ID, gpu-4x", launch.Name, launch.ProviderID, launch.InstanceType)
	}
	for key, want := range map[string]string{v1.NodePoolLabelKey: "gpu", corev1.LabelInstanceTypeStable: "gpu-4x",
		corev1.LabelTopologyZone: "zone-a", v1.CapacityTypeLabelKey: "on-demand", corev1.LabelHostname: "gpu-abcde"} {
		if launch.Labels[key] != want {
			t.Errorf("label %s = %q, want %q", key, launch.Labels[key], want)
		}
	}
	if len(launch.Taints) != 3 || !launch.Taints[0].MatchTaint(&v1.UnregisteredNoExecuteTaint) ||
		launch.Taints[1].Key != "nvidia.com/gpu" || launch.Taints[2].Key != "example.com/agent-not-ready" {
		t.Errorf("registration taints %v, want unregistered, the claim's taints, its startup taints", launch.Taints)
	}
	if cpu := launch.Allocatable[corev1.ResourceCPU]; cpu.Cmp(resource.MustParse("1900m")) != 0 {
		t.Errorf("allocatable cpu %s, want kwok's capacity less 100m kube-reserved", cpu.String())
	}
	if launch.BootDelaySeconds != 0 {
		t.Errorf("gpu-4x has no bootDelay, got %gs", launch.BootDelaySeconds)
	}
	if created.Status.ProviderID != launch.ProviderID || created.Status.NodeName != "" {
		t.Errorf("created %+v: want the provider ID and no node name before registration", created.Status)
	}
}

func TestANodeBootsAfterItsTypesDelayUnlessItsNodeClassSaysOtherwise(t *testing.T) {
	for _, c := range []struct {
		registrationDelay time.Duration
		want              float64
	}{{0, 180}, {2 * time.Second, 2}} {
		cloudProvider, nodes := provider(t, c.registrationDelay)
		if _, err := cloudProvider.Create(context.Background(), nodeClaim("gpu-8x")); err != nil {
			t.Fatal(err)
		}
		if got := nodes.launched[0].BootDelaySeconds; got != c.want {
			t.Errorf("nodeRegistrationDelay %s: boot delay %gs, want %gs", c.registrationDelay, got, c.want)
		}
	}
}

func TestDeleteStopsTheNodeAndReportsTheInstanceGone(t *testing.T) {
	cloudProvider, nodes := provider(t, 0)
	claim := nodeClaim("gpu-8x")
	claim.Status.ProviderID = "localcluster://gpu-abcde"
	err := cloudProvider.Delete(context.Background(), claim)
	if !cloudprovider.IsNodeClaimNotFoundError(err) || len(nodes.deleted) != 1 || nodes.deleted[0] != "gpu-abcde" {
		t.Errorf("Delete: %v, deleted %v; want NodeClaimNotFound after deleting gpu-abcde", err, nodes.deleted)
	}
	if _, err := cloudProvider.Get(context.Background(), "localcluster://gone"); !cloudprovider.IsNodeClaimNotFoundError(err) {
		t.Errorf("Get of an unknown instance: %v, want NodeClaimNotFound", err)
	}
}
