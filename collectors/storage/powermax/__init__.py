"""Dell EMC PowerMax/VMAX/Symmetrix: symstat over SSH, or Unisphere REST performance."""
