"""Storage array collectors: one package per array family (NetApp ONTAP, EMC XtremIO, PowerMax)."""
