"""Dell EMC XtremIO: cluster and volume performance from the XMS REST API v3."""
