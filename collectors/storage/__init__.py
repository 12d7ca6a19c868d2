"""Storage collectors: Linux hosts and arrays (NetApp ONTAP, EMC XtremIO, PowerMax)."""
