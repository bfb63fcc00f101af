// Command karpentercontroller is Karpenter's core operator (its provisioner, disruption,
// NodeClaim lifecycle, garbage collection and node repair controllers) run with the local
// cluster's cloud provider, wired as Karpenter's own kwok/main.go wires the KWOK provider.
// The instance types are kwok's format (INSTANCE_TYPES_FILE_PATH); the node class is
// kwok's KWOKNodeClass.
package main

import (
	"sigs.k8s.io/controller-runtime/pkg/log"

	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	"sigs.k8s.io/karpenter/pkg/controllers"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/operator"

	"distributetrain.local/localcluster/karpentercontroller/cloudprovider"
)

func main() {
	ctx, op := operator.NewOperator()
	instanceTypes, err := cloudprovider.ConstructInstanceTypes(ctx)
	if err != nil {
		log.FromContext(ctx).Error(err, "failed constructing instance types")
		panic(err)
	}
	nodes, err := cloudprovider.NewLocalNodesFromEnv()
	if err != nil {
		log.FromContext(ctx).Error(err, "failed configuring the local nodes")
		panic(err)
	}

	overlayUndecoratedCloudProvider := cloudprovider.New(op.GetClient(), instanceTypes, nodes)
	cloudProvider := overlay.Decorate(overlayUndecoratedCloudProvider, op.GetClient(), op.InstanceTypeStore)
	clusterState := state.NewCluster(op.Clock, op.GetClient(), cloudProvider)
	op.
		WithControllers(ctx, controllers.NewControllers(
			ctx,
			op.Manager,
			op.Clock,
			op.GetClient(),
			op.EventRecorder,
			cloudProvider,
			overlayUndecoratedCloudProvider,
			clusterState,
			op.InstanceTypeStore,
		)...).Start(ctx)
}
