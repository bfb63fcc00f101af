module distributetrain.local/localcluster/images/pause

go 1.25.0
