package executor

// SetRename replaces the function that moves files into the trash.
func SetRename(x *Executor, rename func(oldpath, newpath string) error) { x.rename = rename }
