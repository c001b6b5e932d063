"""pyrdmacm: RDMA CM address resolution over the kernel's ucma ABI, in pure Python."""
