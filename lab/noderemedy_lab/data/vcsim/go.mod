module noderemedy.local/vcsimlab

go 1.23.0

require github.com/vmware/govmomi v0.52.0
