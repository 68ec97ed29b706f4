// placeholder — being written
