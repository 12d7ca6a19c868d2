module db2vtop/tests/vsphere-sim

go 1.24.13

require github.com/vmware/govmomi v0.53.0

require github.com/google/uuid v1.6.0 // indirect
